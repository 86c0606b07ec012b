"""WSGI entry point: `gunicorn wsgi:app` (with gunicorn.conf.py) or `flask --app wsgi run`."""

from app import create_app

app = create_app()
