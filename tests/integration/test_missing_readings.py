"""A "—" on an NPU card says why in its title: a 310P chip (Atlas 300I Pro / Duo) reports no power per
chip, so its card says so instead of looking broken; other chips wait for their first sample."""

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_a_310p_card_says_its_chip_reports_no_power_and_a_910b_card_waits_for_a_reading(charlie):
    from panel.nodes.models import Node, Npu

    duo = Node.objects.create(name="duo", status="online")
    a2 = Node.objects.create(name="a2", status="online")
    Npu.objects.create(node=duo, npu_id=0, chip_id=0, name="310P3", memory_total_mb=44280)
    Npu.objects.create(node=a2, npu_id=0, chip_id=0, name="910B3", hbm_total_mb=65536)
    client = Client()
    client.force_login(charlie)
    page = client.get("/").content.decode()
    cards = page.split('data-testid="npu-card"')[1:]
    by_name = {
        name: card for card in cards for name in ("310P3", "910B3") if f'data-f="name">{name}<' in card
    }
    assert "This chip does not report its power" in by_name["310P3"]
    assert "This chip does not report its power" not in by_name["910B3"]
    assert "No reading yet" in by_name["910B3"]
