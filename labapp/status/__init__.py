"""The status page: every component probed, up or down, with its error and round trip."""
