"""The planner: will a model fit these NPUs and with which vLLM settings (plan, its types, layouts, MoE, the
prefill/decode split, throughput estimates, the node shapes it proposes when it does not fit, reasons,
explanations, the CLI) and the byte arithmetic behind it."""
