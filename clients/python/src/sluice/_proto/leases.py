"""The messages of api/sluice/v1/leases.proto, by name (built from descriptors.binpb; types
in leases.pyi)."""

from . import file_messages as _file_messages

globals().update(_file_messages("sluice/v1/leases.proto"))
