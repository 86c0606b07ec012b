"""The records the service reads and writes (records.py) and its path and query parameters
(parameters.py), as marshmallow schemas."""
