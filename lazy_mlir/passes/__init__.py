"""Named pass pipelines and the one runner that applies them."""
