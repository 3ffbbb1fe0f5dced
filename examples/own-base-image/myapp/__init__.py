"""An example application on its own base image with taskfleet installed into it."""
