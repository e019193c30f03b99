"""The sandbox's HTTP endpoints, grouped by resource; ``sandbox.app`` assembles them."""
