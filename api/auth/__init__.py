"""Users, projects, roles and API tokens."""
