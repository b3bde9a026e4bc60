"""Minimal Django settings for the Channels floor (``bench.load.floor_app``): the in-memory layer
with PicoBot's capacity and expiry, nothing else."""

import os

SECRET_KEY = "bench-floor-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = ["channels"]
USE_TZ = True
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels.layers.InMemoryChannelLayer",
        "CONFIG": {"capacity": int(os.environ.get("PICOBOT_CHANNEL_CAPACITY", "1000")), "expiry": 60},
    }
}
