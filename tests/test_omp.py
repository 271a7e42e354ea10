"""xinfer_async/_omp.py: the OpenMP defaults (wait policy, thread count) and the core count."""
import pytest

from xinfer_async._omp import configure, physical_cores, replay_threads


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
    assert replay_threads({}) == -1 and replay_threads({"XINFER_CPU_TEAM": "0"}) == -1
    assert replay_threads({"XINFER_CPU_TEAM": "1"}) == 0
    with pytest.raises(ValueError, match="XINFER_CPU_TEAM must be 0 or 1, got 'yes'"):
        replay_threads({"XINFER_CPU_TEAM": "yes"})
