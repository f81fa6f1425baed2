"""TODO: describe this package."""
