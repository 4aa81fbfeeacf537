"""The deployment spec and its apply: what a spec says, which model it serves, the request it
becomes, and rollback."""
