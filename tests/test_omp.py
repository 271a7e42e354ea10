"""xinfer_async/_omp.py: the OpenMP defaults (wait policy, thread count) and the core count."""
import pytest

from xinfer_async._omp import PER_KERNEL, TEAM, ReplayModes, configure, physical_cores, replay_threads


def test_defaults_passive_and_physical_cores():
    env = {}
    configure(env, cores=lambda: 3)
    assert env == {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "3"}


def test_xinfer_threads_and_explicit_settings_win():
    env = {"XINFER_THREADS": "5"}
    configure(env, cores=lambda: 3)
    assert env["OMP_NUM_THREADS"] == "5"
    env = {"XINFER_THREADS": "5", "OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "ACTIVE"}
    configure(env, cores=lambda: 3)
    assert env["OMP_NUM_THREADS"] == "2" and env["OMP_WAIT_POLICY"] == "ACTIVE"


@pytest.mark.parametrize("bad", ["0", "-1", "two", ""])
def test_bad_xinfer_threads(bad):
    with pytest.raises(ValueError, match=f"XINFER_THREADS must be a positive integer, got {bad!r}"):
        configure({"XINFER_THREADS": bad}, cores=lambda: 3)


def _topology(root, cpus):
    """Fake sysfs: cpus = {cpu id: (package, core)}."""
    for cpu, (package, core) in cpus.items():
        d = root / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / "physical_package_id").write_text(f"{package}\n")
        (d / "core_id").write_text(f"{core}\n")


def test_physical_cores_counts_smt_siblings_once(tmp_path):
    # 2 packages x 2 cores x 2 SMT threads; this process allowed on cpus 0, 1, 4, 5, 6
    _topology(tmp_path, {0: (0, 0), 1: (0, 1), 2: (1, 0), 3: (1, 1), 4: (0, 0), 5: (0, 1), 6: (1, 0), 7: (1, 1)})
    assert physical_cores({0, 1, 4, 5, 6}, str(tmp_path)) == 3
    assert physical_cores({0, 4}, str(tmp_path)) == 1
    assert physical_cores({0, 9}, str(tmp_path)) == 2  # topology unreadable: the logical count


def test_physical_cores_here_is_positive():
    assert 1 <= physical_cores() <= (__import__("os").cpu_count() or 1)


def test_replay_threads():
    assert replay_threads({}) is None and replay_threads({"XINFER_CPU_TEAM": "auto"}) is None
    assert replay_threads({"XINFER_CPU_TEAM": "0"}) == PER_KERNEL == -1
    assert replay_threads({"XINFER_CPU_TEAM": "1"}) == TEAM == 0
    with pytest.raises(ValueError, match="XINFER_CPU_TEAM must be auto, 0 or 1, got 'yes'"):
        replay_threads({"XINFER_CPU_TEAM": "yes"})


def _drive(modes, key, seconds, runs):
    """Run ``key`` ``runs`` times with ``seconds[mode]`` a run; the modes picked, in order."""
    picked = []
    for _ in range(runs):
        m = modes.pick(key)
        modes.record(key, m, seconds[m])
        picked.append(m)
    return picked


def test_replay_modes_forced_never_times():
    for forced in (TEAM, PER_KERNEL):
        modes = ReplayModes(forced)
        assert _drive(modes, 1, {TEAM: 1.0, PER_KERNEL: 2.0}, 50) == [forced] * 50
        assert modes.choice(1) == forced


def test_replay_modes_runs_the_faster_and_explores_the_other():
    modes = ReplayModes(None)
    picked = _drive(modes, "decode", {TEAM: 0.010, PER_KERNEL: 0.012}, 4 + 3 * ReplayModes.EXPLORE)
    assert picked[:4] == [TEAM, PER_KERNEL, TEAM, PER_KERNEL]  # both timed first
    rest = picked[4:]
    assert modes.choice("decode") == TEAM
    assert rest.count(PER_KERNEL) == 3  # the other once every EXPLORE runs
    assert all(rest[i] == PER_KERNEL for i in range(len(rest)) if (i + 4) % ReplayModes.EXPLORE == 0)
    # another step keeps its own times
    assert _drive(modes, "prefill", {TEAM: 0.05, PER_KERNEL: 0.03}, 8)[4:] == [PER_KERNEL] * 4


def test_replay_modes_move_when_the_chosen_mode_slows_down():
    """Quiet cores favour the team; a busy machine slows it 5x: within a few runs the choice moves."""
    modes = ReplayModes(None)
    _drive(modes, 0, {TEAM: 0.010, PER_KERNEL: 0.012}, 40)
    assert modes.choice(0) == TEAM
    picked = _drive(modes, 0, {TEAM: 0.050, PER_KERNEL: 0.012}, 10)
    assert modes.choice(0) == PER_KERNEL and picked[-5:] == [PER_KERNEL] * 5
    # and back once the team is faster again (seen when the other mode is explored)
    _drive(modes, 0, {TEAM: 0.008, PER_KERNEL: 0.012}, 4 * ReplayModes.EXPLORE)
    assert modes.choice(0) == TEAM
