"""The version of taskfleet: the one place it is written.

The library's and the operator's distributions, ``taskfleet --version``, the worker's and
the operator's metrics, the images and the Helm chart all take it from here. Between
releases it names the next release as a development version; ``make release VERSION=x.y.z``
stamps the released version into the copy of the tree it builds from (release/release.py),
never into this file.
"""

__version__ = "0.3.0.dev0"
