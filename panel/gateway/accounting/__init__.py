"""What requests cost: usage recorded per request, the gateway's figures on /metrics, and the usage page's
reports."""
