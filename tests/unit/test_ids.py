from semula.core.ids import new_id, new_ids


def test_ids_are_prefixed_and_increase_within_a_process():
    ids = [new_id("call") for _ in range(5000)]
    assert all(i.startswith("cal_") and len(i) == 28 for i in ids)
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_ids_made_together_are_what_one_at_a_time_would_be():
    batch = new_ids("call", 300)
    one = new_id("call")
    assert len(set(batch)) == 300 and batch == sorted(batch) and one > batch[-1]
    assert all(i.startswith("cal_") and len(i) == 28 for i in [*batch, one])
