"""The deployment wizard as the page tests walk it: a small model's facts, a signed-in browser client, the
steps up to the engine form and that form's fields (the decode role's autoscaling ones named as on Edit)."""

from django.test import Client

# A small Qwen2-shaped model: 14 heads, 2 KV heads, about 1 GiB of bfloat16 weights.
SMALL_QWEN = {
    "architecture": "Qwen2ForCausalLM",
    "model_type": "qwen2",
    "params": 494_032_768,
    "weights_bytes": 988_065_536,
    "dtype": "bfloat16",
    "hidden_size": 896,
    "num_layers": 24,
    "num_attention_heads": 14,
    "num_kv_heads": 2,
    "head_dim": 64,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "moe": None,
    "mla": None,
    "quantization": None,
}


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def walk_to_engine_step(client, artifact, npus=("a2-node:0",), name="qwen-small"):
    client.get("/deployments/new/")
    response = client.post("/deployments/new/model/", {"artifact": artifact.pk, "name": name})
    assert response.status_code == 302, response.content.decode()[:2000]
    response = client.post("/deployments/new/placement/", {"npus": list(npus)})
    assert response.status_code == 302, response.content.decode()[:3000]
    assert response["Location"].endswith("/deployments/new/engine/")


def engine_fields(**overrides):
    fields = {
        "tensor_parallel_size": "",
        "data_parallel_size": "",
        "max_model_len": "4096",
        "dtype": "auto",
        "gpu_memory_utilization": "0.9",
        "quantization": "",
        "served_model_name": "",
        "port": "",
        "extra_flags": "",
    }
    fields.update(overrides)
    return fields


# The decode role's autoscaling, as a person ticks and fills it on the wizard's engine step or on Edit (both
# forms name the fields alike, panel/deployments/pages/autoscale_form.py): 1-3 engines on KV cache usage.
DECODE_AUTOSCALE_FIELDS = {
    "decode_autoscale": "on",
    "decode_autoscale_min": "1",
    "decode_autoscale_max": "3",
    "decode_autoscale_target": "kv_usage",
    "decode_autoscale_value": "0.8",
    "decode_autoscale_up_after_s": "30",
    "decode_autoscale_down_after_s": "300",
}
