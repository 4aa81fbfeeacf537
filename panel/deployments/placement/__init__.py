"""Placement and planning: which nodes and NPUs a deployment takes, the planner's plan on them,
engine ports, and the row a plan makes."""
