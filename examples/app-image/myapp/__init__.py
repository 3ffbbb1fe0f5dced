"""An example application whose worker image adds a third-party dependency."""
