"""panel.core.rest.strict.wrong_types: a scalar of another JSON type than the schema's is refused, but a field
that the body's alternatives type differently may be either."""

from panel.core.rest.strict import wrong_types

PLAN_BODY = {
    "oneOf": [
        {"type": "object", "properties": {"model": {"type": "integer"}, "replicas": {"type": "integer"}}},
        {"type": "object", "properties": {"model": {"type": "string"}, "replicas": {"type": "integer"}}},
    ]
}


def test_a_quoted_number_is_refused_naming_the_field():
    assert wrong_types({"replicas": "2"}, PLAN_BODY) == {"replicas": "integer"}


def test_a_field_the_alternatives_type_differently_takes_either_type():
    assert wrong_types({"model": 7}, PLAN_BODY) == {}
    assert wrong_types({"model": "qwen2.5-7b"}, PLAN_BODY) == {}


def test_a_field_both_alternatives_type_alike_is_still_checked():
    by_id = {"type": "object", "properties": {"model": {"type": "integer"}}}
    body = {"oneOf": [PLAN_BODY["oneOf"][0], by_id]}
    assert wrong_types({"model": "7"}, body) == {"model": "integer"}
