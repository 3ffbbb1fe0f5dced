"""A handler module that fails at import, as a user's module with a bug would."""

1 / 0  # noqa: B018
