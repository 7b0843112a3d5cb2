"""CIFAR-10 from its python-pickle batches: the restricted unpickler, the loader, RGB layout."""

from __future__ import annotations

import os
import pickle
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from cifar_format import CLASSES, py2_pickle, write_cifar10

from groupattn.data import (
    CIFAR10_CLASSES,
    DataError,
    UnsafePickleError,
    channel_statistics,
    find_cifar10,
    load_cifar10,
    load_pickle_safely,
    read_cifar10_batch,
)


# ---------------------------------------------------------------- the restricted unpickler
def _text_keys(value: dict) -> dict:
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in value.items()}


class _RunsCommand:
    """Unpickling this with plain ``pickle`` would run ``os.system(command)``."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (self.command,))


class _Calls:
    def __init__(self, func: object, *args: object) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return (self.func, self.args)


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_a_pickle_reducing_to_os_system_is_rejected_without_running(
    tmp_path: Path, protocol: int
) -> None:
    marker = tmp_path / "pwned"
    blob = pickle.dumps(
        {"data": [1, 2], "evil": _RunsCommand(f"touch {marker}")}, protocol=protocol
    )
    with pytest.raises(
        UnsafePickleError,
        match=r"got a reference to (posix|os|nt)\.system \(refused, nothing was run\)",
    ):
        load_pickle_safely(blob)
    assert not marker.exists()
    path = tmp_path / "data_batch_1"
    path.write_bytes(blob)
    with pytest.raises(UnsafePickleError):
        read_cifar10_batch(path)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("payload", "refused"),
    [
        (_Calls(eval, "1 + 1"), "builtins.eval"),
        (_Calls(exec, "x = 1"), "builtins.exec"),
        (_Calls(subprocess.call, ["true"]), "subprocess.call"),
        (_Calls(np.load, "x.npy"), "numpy.load"),
        (_Calls(torch.load, "x.pt"), "torch.serialization.load"),
    ],
)
def test_other_callables_are_refused_by_name(payload: object, refused: str) -> None:
    with pytest.raises(UnsafePickleError, match=refused.replace(".", r"\.")):
        load_pickle_safely(pickle.dumps([payload], protocol=4))


def test_object_and_structured_arrays_are_refused() -> None:
    with pytest.raises(UnsafePickleError, match="plain numeric dtype"):
        load_pickle_safely(pickle.dumps(np.array([1, "a"], dtype=object), protocol=4))
    structured = np.zeros(2, dtype=[("a", "u1"), ("b", "f4")])
    with pytest.raises(UnsafePickleError, match=r"plain numeric dtype .* got 'V5'"):
        load_pickle_safely(pickle.dumps(structured, protocol=4))


def test_allowed_containers_and_arrays_round_trip() -> None:
    value = {
        "ints": [1, -2, 3],
        "text": "abc",
        "raw": b"\x00\xff",
        "nested": ({"a": 1.5}, [True, None]),
        "u8": np.arange(12, dtype=np.uint8).reshape(3, 4),
        "f64": np.linspace(0, 1, 6).reshape(2, 3),
        "fortran": np.asfortranarray(np.arange(6, dtype=np.int32).reshape(2, 3)),
        "big_endian": np.arange(4, dtype=">i4"),
    }
    for blob in (py2_pickle(value), pickle.dumps(value, protocol=4)):
        loaded = _text_keys(load_pickle_safely(blob))
        assert loaded["ints"] == [1, -2, 3] and loaded["nested"][1] == [True, None]
        for key in ("u8", "f64", "fortran", "big_endian"):
            np.testing.assert_array_equal(loaded[key], value[key])
            assert loaded[key].dtype == value[key].dtype
    # the raw bytes of Python 3's protocol 2 go through _codecs.encode: refused, by name
    with pytest.raises(UnsafePickleError, match=r"_codecs\.encode"):
        load_pickle_safely(pickle.dumps(b"\x00\xff", protocol=2))
    # Python 2's layout (the real CIFAR files): strings arrive as bytes
    assert load_pickle_safely(py2_pickle({b"k": np.arange(3, dtype=np.uint8)}))[b"k"].tolist() == [
        0,
        1,
        2,
    ]


def test_malformed_and_oversized_files_are_data_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="expected a readable pickle"):
        load_pickle_safely(pickle.dumps([1, 2, 3], protocol=2)[:-3])
    with pytest.raises(DataError, match="does not exist"):
        load_pickle_safely(tmp_path / "missing")
    big = tmp_path / "big"
    big.write_bytes(pickle.dumps(list(range(100))))
    with pytest.raises(DataError, match="expected a file of at most 16 bytes"):
        load_pickle_safely(big, max_bytes=16)
    # bytes(n) would allocate n bytes: refused
    with pytest.raises(UnsafePickleError, match="got a size"):
        load_pickle_safely(pickle.dumps(_Calls(bytes, 10**12), protocol=4))


# ---------------------------------------------------------------- CIFAR-10 batches
@pytest.mark.parametrize("protocol", [None, 4])
def test_load_cifar10_rgb_layout_labels_and_names(tmp_path: Path, protocol: int | None) -> None:
    written = write_cifar10(
        tmp_path / "cifar-10-batches-py", per_batch=3, n_test=5, protocol=protocol
    )
    assert find_cifar10(tmp_path) == tmp_path / "cifar-10-batches-py"
    split = load_cifar10(tmp_path)
    assert split.train_images.shape == (15, 3, 32, 32) and split.test_images.shape == (5, 3, 32, 32)
    assert split.train_images.dtype == torch.float32 and split.train_labels.dtype == torch.int64
    assert split.class_names == CLASSES and split.normalization is None
    data, _ = written["data_batch_2"]
    image = split.train_images[3]  # the first image of the second batch
    red, green, blue = (
        data[0, k * 1024 : (k + 1) * 1024].reshape(32, 32) / 255.0 for k in range(3)
    )
    np.testing.assert_allclose(image[0].numpy(), red, atol=1e-7)
    np.testing.assert_allclose(image[1].numpy(), green, atol=1e-7)
    np.testing.assert_allclose(image[2].numpy(), blue, atol=1e-7)
    expected = [y for k in range(1, 6) for y in written[f"data_batch_{k}"][1]]
    assert split.train_labels.tolist() == expected
    assert split.test_labels.tolist() == written["test_batch"][1]
    raw, raw_labels = read_cifar10_batch(tmp_path / "cifar-10-batches-py" / "test_batch")
    assert (
        raw.dtype == torch.uint8
        and raw.shape == (5, 3, 32, 32)
        and raw_labels.tolist() == written["test_batch"][1]
    )


def test_load_cifar10_normalisation_limits_and_default_names(tmp_path: Path) -> None:
    write_cifar10(tmp_path, per_batch=4, n_test=6, meta=False)
    plain = load_cifar10(tmp_path)
    assert plain.class_names == list(CIFAR10_CLASSES)
    norm = load_cifar10(tmp_path, normalize=True)
    mean, std = channel_statistics(plain.train_images)
    assert norm.normalization == (mean, std)
    got_mean, got_std = channel_statistics(norm.train_images)
    assert max(abs(m) for m in got_mean) < 1e-6 and max(abs(s - 1) for s in got_std) < 1e-5
    expected_test = (plain.test_images - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(
        std
    ).view(1, 3, 1, 1)
    torch.testing.assert_close(norm.test_images, expected_test.float())
    small = load_cifar10(tmp_path, limit=6, test_limit=2)
    assert small.train_images.shape[0] == 6 and small.test_images.shape[0] == 2
    torch.testing.assert_close(small.train_images, plain.train_images[:6])


def test_load_cifar10_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="expected a folder with CIFAR-10's python batches"):
        load_cifar10(tmp_path)
    write_cifar10(tmp_path)
    (tmp_path / "data_batch_4").unlink()
    with pytest.raises(DataError, match="expected data_batch_4 in"):
        load_cifar10(tmp_path)
    (tmp_path / "data_batch_4").write_bytes(
        py2_pickle({b"data": np.zeros((2, 100), dtype=np.uint8), b"labels": [0, 1]})
    )
    with pytest.raises(
        DataError, match=r"data_batch_4\): expected 'data' as a uint8 array \(N, 3072\)"
    ):
        load_cifar10(tmp_path)
    (tmp_path / "data_batch_4").write_bytes(py2_pickle({b"pixels": 1}))
    with pytest.raises(
        DataError, match="expected the keys 'data' and 'labels', got \\['pixels'\\]"
    ):
        load_cifar10(tmp_path)
    (tmp_path / "data_batch_4").write_bytes(
        py2_pickle({b"data": np.zeros((2, 3072), dtype=np.uint8), b"labels": [0, 12]})
    )
    with pytest.raises(DataError, match=r"expected train labels in 0\.\.9, got 0\.\.12"):
        load_cifar10(tmp_path)
    with pytest.raises(DataError, match="positive limit"):
        load_cifar10(tmp_path, limit=0)


def test_hand_made_streams_cannot_alter_or_bypass_the_allowed_names() -> None:
    """Opcode-level attacks: NEWOBJ on an allowed name, BUILD on an allowed callable or on
    the ndarray stand-in, calling the stand-in, a persistent id. Each is refused."""
    p = pickle
    head = p.PROTO + b"\x02"
    dtype = p.GLOBAL + b"numpy\ndtype\n"
    ndarray = p.GLOBAL + b"numpy\nndarray\n"
    attacks = [
        (
            head + dtype + p.EMPTY_TUPLE + p.NEWOBJ + p.STOP,
            DataError,
            "NEWOBJ class argument must be a type",
        ),
        (
            head + dtype + p.EMPTY_DICT + p.BUILD + p.STOP,
            UnsafePickleError,
            "state for an allowed callable",
        ),
        (
            head + ndarray + p.EMPTY_DICT + p.BUILD + p.STOP,
            UnsafePickleError,
            "state for numpy.ndarray itself",
        ),
        (head + ndarray + p.EMPTY_TUPLE + p.REDUCE + p.STOP, DataError, "not callable"),
        (head + ndarray + p.STOP, UnsafePickleError, "bare reference to numpy.ndarray"),
        (
            head + p.BINUNICODE + b"\x01\x00\x00\x00x" + p.BINPERSID + p.STOP,
            UnsafePickleError,
            "persistent id",
        ),
    ]
    for blob, error, message in attacks:
        with pytest.raises(error, match=message):
            load_pickle_safely(blob)
    # the allowed names still behave: a real array loads after the attacks
    assert load_pickle_safely(pickle.dumps(np.arange(3, dtype=np.uint8), protocol=4)).tolist() == [
        0,
        1,
        2,
    ]
