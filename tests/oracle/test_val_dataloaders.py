"""`trainer.val_dataloaders` has the shape the user gave the val loaders in, as in Lightning."""

from oracle_runs import run_both


def test_val_dataloaders_keep_the_shape_they_were_given_in(tmp_path):
    lightning, surge = run_both("val_dataloaders_shape.py", tmp_path)
    assert lightning.record["one"] == ["DataLoader", 3]
    assert lightning.record["list_of_two"] == ["list", [3, 2]]
    # each entry point shows its own loaders, in the shape given, and clears the others'
    assert [look[:4] for look in lightning.record["stages/one"][1]] == [[None, ["DataLoader", 3], None, None]] + [
        [None, None, ["DataLoader", 3], None], [None, None, None, ["DataLoader", 3]],
        [["DataLoader", 4], ["DataLoader", 3], None, None], [None, ["DataLoader", 2], None, None],
    ]  # fmt: skip
    # the batch counts: validate()'s while it is the last entry point, else fit's; test's and predict's stay
    assert [look[4:] for look in lightning.record["stages/list_of_two"][1]][-1] == [[2, 2], [3, 2], [3, 2]]
    assert surge.record == lightning.record
