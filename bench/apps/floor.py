"""The floor: a bare Flask route that ignores the body. The speed limit of this stack."""

from flask import Flask

app = Flask(__name__)


@app.post("/plants")
def plants() -> dict[str, str]:
    return {"name": "Boston fern", "tag": "fern"}
