"""The embedded service stack that `make run` supervises (see Procfile)."""
