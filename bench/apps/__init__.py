"""The apps the service is measured against: the bare Flask floor and the FastAPI peers."""
