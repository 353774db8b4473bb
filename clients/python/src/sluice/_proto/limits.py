"""The messages of api/sluice/v1/limits.proto, by name (built from descriptors.binpb; types
in limits.pyi)."""

from . import file_messages as _file_messages

globals().update(_file_messages("sluice/v1/limits.proto"))
