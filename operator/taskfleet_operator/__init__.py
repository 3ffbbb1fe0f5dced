"""The taskfleet operator: reconciles TaskQueue resources into worker fleets."""
