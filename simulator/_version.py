"""The version of shardsim, in a module of its own so that any layer can read it without
importing the package's public surface (`simulator/__init__.py` imports the API lazily)."""

__version__ = "0.1.0"
