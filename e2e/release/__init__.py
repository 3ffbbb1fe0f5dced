"""The release stage (``make e2e-release``): releases installed from their artefacts alone,
an upgrade from the previous release under load, the uninstall. Outside ``make check``."""

import pytest

# The stage's helpers use the suite's fixture plugin, which its test modules also load
# (pytest_plugins): imported first from here, it must be rewritten like a plugin is.
pytest.register_assert_rewrite("e2e.lib.fixtures")
