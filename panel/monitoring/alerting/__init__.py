"""Alerts: the conditions a sample shows and the rows kept in step with them, deployments' alerts, the alert's
shape on the wire, and the alert webhook."""
