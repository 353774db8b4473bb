"""The messages of api/quotaservice/quota_service.proto, by name (built from descriptors.binpb; types
in quota_service.pyi)."""

from . import file_messages as _file_messages

globals().update(_file_messages("quotaservice/quota_service.proto"))
