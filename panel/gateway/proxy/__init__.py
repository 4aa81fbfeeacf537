"""A request's way through the gateway: the ASGI application, the OpenAI-compatible handler, the relay and its
HTTP/1.1 transport to the engines, the disaggregated (prefill/decode) proxy and errors as OpenAI words
them."""
