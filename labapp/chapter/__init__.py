"""The chapter pages: the home page, the sections and their widgets."""
