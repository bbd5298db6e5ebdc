from semula.ids import new_id


def test_ids_are_prefixed_and_increase_within_a_process():
    ids = [new_id("call") for _ in range(5000)]
    assert all(i.startswith("cal_") and len(i) == 28 for i in ids)
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
