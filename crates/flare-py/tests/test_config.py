"""Identity from the launcher's environment, overrides, and configuration errors."""

from __future__ import annotations

import pytest


def test_torchrun_variables_reach_the_ring_header(child):
    env = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "TORCHELASTIC_RUN_ID": "run-42"}
    child.run(
        """
        import flare
        path = flare.init()
        assert "flare-run-42-r3-p" in path, path
        with flare.span("x"):
            pass
        flare.shutdown()
        """,
        env=env,
    )
    info = child.read_dump()["info"]
    assert (info["rank"], info["local_rank"], info["world_size"]) == (3, 1, 8)
    assert info["job_id"] == "run-42"
    assert info["exited"] is True


def test_slurm_variables_reach_the_ring_header(child):
    env = {"SLURM_PROCID": "17", "SLURM_LOCALID": "5", "SLURM_NTASKS": "32", "SLURM_JOB_ID": "987654"}
    child.run("import flare; flare.init(); flare.shutdown()", env=env)
    info = child.read_dump()["info"]
    assert (info["rank"], info["local_rank"], info["world_size"]) == (17, 5, 32)
    assert info["job_id"] == "987654"


def test_torchrun_variables_win_over_slurm_and_flare_job_id_over_both(child):
    env = {
        "RANK": "2", "WORLD_SIZE": "4", "TORCHELASTIC_RUN_ID": "elastic",
        "SLURM_PROCID": "9", "SLURM_NTASKS": "16", "SLURM_JOB_ID": "111",
        "FLARE_JOB_ID": "mine",
    }
    child.run("import flare; flare.init(); flare.shutdown()", env=env)
    info = child.read_dump()["info"]
    assert (info["rank"], info["world_size"], info["job_id"]) == (2, 4, "mine")


def test_keyword_overrides_take_precedence_over_the_environment(child):
    env = {"RANK": "1", "WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "env-job"}
    dump2 = child.tmp / "other.ring"
    child.run(
        f"""
        import flare
        flare.init(job_id="kw-job", rank=5, local_rank=2, world_size=6, dump={str(dump2)!r})
        assert flare.shutdown() == {str(dump2)!r}
        """,
        env=env,
    )
    from flare import _native

    info = _native.read_ring(str(dump2))["info"]
    assert (info["rank"], info["local_rank"], info["world_size"], info["job_id"]) == (5, 2, 6, "kw-job")
    assert not child.dump.exists()  # the keyword replaced FLARE_DUMP


def test_without_launcher_variables_the_process_is_rank_0_of_1(child):
    child.run("import flare; flare.init(); flare.shutdown()")
    info = child.read_dump()["info"]
    assert (info["rank"], info["world_size"], info["job_id"]) == (0, 1, "local")


@pytest.mark.parametrize(
    "env, fragment",
    [
        ({"RANK": "two"}, 'RANK="two"'),
        ({"SLURM_PROCID": "-1"}, "SLURM_PROCID"),
        ({"WORLD_SIZE": "x8"}, "WORLD_SIZE"),
        ({"RANK": "8", "WORLD_SIZE": "8"}, "outside a world of 8"),
        ({"FLARE_RING_EVENTS": "1000"}, "power of two"),
    ],
)
def test_bad_environment_raises_value_error_naming_the_variable(child, env, fragment):
    msg = child.result(
        """
        import flare
        try:
            flare.init()
        except ValueError as e:
            emit(str(e))
        else:
            emit(None)
        """,
        env=env,
    )
    assert msg is not None and fragment in msg, msg


def test_bad_keyword_arguments_raise_clear_errors(child):
    out = child.result(
        """
        import flare
        out = {}
        for kw in ({"rank": -1}, {"world_size": 2**40}, {"ring_events": 100}, {"job_id": ""}):
            try:
                flare.init(**kw)
            except ValueError as e:
                out[next(iter(kw))] = str(e)
        try:
            flare.init(rnak=1)
        except TypeError as e:
            out["typo"] = str(e)
        emit(out)
        """
    )
    assert "rank=-1" in out["rank"]
    assert "world_size=" in out["world_size"]
    assert "power of two" in out["ring_events"]
    assert "empty job id" in out["job_id"]
    assert "rnak" in out["typo"]


def test_unusable_shm_dir_raises_os_error_with_the_path(child):
    blocker = child.tmp / "not-a-dir"
    blocker.write_text("x")
    out = child.result(
        f"""
        import flare
        try:
            flare.init(shm_dir={str(blocker / "sub")!r})
        except OSError as e:
            emit([type(e).__name__, e.errno is not None, str(e)])
        """
    )
    assert out[1], out
    assert "not-a-dir" in out[2]


def test_second_init_same_identity_is_idempotent_other_identity_is_an_error(child):
    out = child.result(
        """
        import flare
        a = flare.init(rank=1, world_size=2)
        b = flare.init(rank=1, world_size=2)
        try:
            flare.init(rank=0, world_size=2)
        except RuntimeError as e:
            err = str(e)
        emit([a == b, err])
        """
    )
    assert out[0] is True
    assert "already initialized" in out[1]
