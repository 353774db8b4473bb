"""The messages of api/doorman/doorman.proto, by name (built from descriptors.binpb; types
in doorman.pyi)."""

from . import file_messages as _file_messages

globals().update(_file_messages("doorman/doorman.proto"))
