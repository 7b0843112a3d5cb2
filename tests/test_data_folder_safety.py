"""Image folders as untrusted input (issue #17, item 4).

A pixel budget checked from each header before decoding (decompression bombs included),
symlinks leading outside the data root, hidden and non-image files, corrupt images, and
decoding only the files a limit keeps. Every file is generated in ``tmp_path``.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
import warnings
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image, ImageFile

from groupattn.training import DataError, TrainingData, _data, load_image_folder, load_training_data
from groupattn.training._data import MAX_IMAGE_PIXELS, SKIP_REASONS

BOMB_SIDE = 12_000  # 144 M pixels: over the default budget, and over Pillow's own warning limit


# ---------------------------------------------------------------- file helpers
def _png(path: Path, side: int = 8, seed: int = 0, height: int | None = None) -> Path:
    """A small random grayscale PNG ``height × side`` (default square)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(
        0, 256, size=(height or side, side), dtype=np.uint8
    )
    Image.fromarray(pixels, mode="L").save(path)
    return path


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _bomb_png(path: Path, width: int, height: int) -> Path:
    """A valid all-black 1-bit PNG of ``width × height``: tiny on disk, huge once decoded.

    Written chunk by chunk with zlib (what PIL's ``Image.new("1", …).save`` produces, without
    allocating the image in the test process).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    row = b"\x00" * (1 + (width + 7) // 8)  # filter byte + packed bits
    compressor = zlib.compressobj(9)
    block = row * 1000
    idat = b"".join(compressor.compress(block) for _ in range(height // 1000))
    idat += compressor.compress(row * (height % 1000)) + compressor.flush()
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)  # 1 bit, grayscale
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")
    )
    return path


def _classes(
    root: Path, names: tuple[str, ...] = ("a", "b"), per_class: int = 3, side: int = 8
) -> Path:
    for c, name in enumerate(names):
        for k in range(per_class):
            _png(root / name / f"{k}.png", side=side, seed=10 * c + k)
    return root


def _symlink(link: Path, target: Path) -> None:
    link.symlink_to(target, target_is_directory=target.is_dir())


def _counting(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[object]:
    """Replace ``owner.name`` by a wrapper that records its first argument on each call."""
    calls: list[object] = []
    real: Callable[..., Any] = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[0] if args else None)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, wrapper)
    return calls


def _decoded_names(loads: list[object]) -> set[str]:
    """The file names of the images whose pixels were loaded (``ImageFile.load`` calls)."""
    return {Path(str(getattr(image, "filename", ""))).name for image in loads}


def _no_pillow(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "PIL" else real_find_spec(name, *a),
    )


# ---------------------------------------------------------------- pixel budget, decompression bombs
def test_bomb_png_is_what_the_tests_assume(tmp_path: Path) -> None:
    bomb = _bomb_png(tmp_path / "bomb.png", BOMB_SIDE, BOMB_SIDE)
    assert bomb.stat().st_size < 100_000
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Image.open(bomb) as image:
            assert image.size == (BOMB_SIDE, BOMB_SIDE)
    assert any(issubclass(w.category, Image.DecompressionBombWarning) for w in caught)


def test_decompression_bomb_is_refused_fast_as_an_error_naming_file_size_and_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _png(tmp_path / "a" / "0.png")
    _bomb_png(tmp_path / "b" / "bomb.png", BOMB_SIDE, BOMB_SIDE)
    loads = _counting(monkeypatch, ImageFile.ImageFile, "load")
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning may escape: Pillow's bomb warning included
        with pytest.raises(DataError) as raised:
            load_image_folder(tmp_path, test_fraction=0.5)
    assert time.perf_counter() - start < 2.0
    message = str(raised.value)
    assert message.startswith("load_image_folder:")
    assert "bomb.png" in message and f"{BOMB_SIDE}x{BOMB_SIDE}" in message
    assert f"{MAX_IMAGE_PIXELS:,}" in message and "before decoding" in message
    assert _decoded_names(loads) == {"0.png"}  # only the small image was decoded


def test_decompression_bomb_stays_far_below_300_mb_in_a_fresh_process(tmp_path: Path) -> None:
    pytest.importorskip("resource")
    _bomb_png(tmp_path / "data" / "a" / "bomb.png", BOMB_SIDE, BOMB_SIDE)
    _png(tmp_path / "data" / "a" / "small.png")
    script = """
import json, resource, sys, time
import PIL.Image, PIL.PngImagePlugin
from groupattn.training import DataError, load_image_folder
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
try:
    load_image_folder(sys.argv[1], test_fraction=0.5)
    outcome = "loaded"
except DataError as error:
    outcome = str(error)
elapsed = time.perf_counter() - start
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
print(json.dumps({"outcome": outcome, "seconds": elapsed, "growth": (after - before) * scale}))
"""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert "bomb.png" in report["outcome"] and "pixels" in report["outcome"]
    assert report["seconds"] < 2.0
    assert report["growth"] < 100 * 2**20, (
        report
    )  # decoding it would take > 144 MB, as float32 576 MB


def test_pillow_hard_limit_is_a_data_error_even_with_a_larger_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    side = 20_000  # 400 M pixels: over twice Pillow's default limit, so Pillow raises by itself
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 89_478_485)  # Pillow's default, whatever set it
    _bomb_png(tmp_path / "a" / "huge.png", side, side)
    with pytest.raises(DataError, match=r"huge\.png.*decompression bomb"):
        load_image_folder(tmp_path, max_image_pixels=10**9)


def test_pixel_budget_is_a_keyword_and_is_checked_before_decoding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _classes(tmp_path, side=40)
    loads = _counting(monkeypatch, ImageFile.ImageFile, "load")
    with pytest.raises(
        DataError, match=r"at most 1,000 pixels \(max_image_pixels\), got .*0\.png of 40x40"
    ):
        load_image_folder(tmp_path, max_image_pixels=1000)
    assert loads == []  # refused from the header
    assert load_image_folder(tmp_path, max_image_pixels=1600).input_shape == (1, 40, 40)


def test_pixel_budget_applies_without_pillow_from_the_png_header(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _bomb_png(tmp_path / "a" / "bomb.png", BOMB_SIDE, BOMB_SIDE)
    _png(tmp_path / "a" / "small.png")
    _no_pillow(monkeypatch)
    import matplotlib.image as mpimg

    reads = _counting(monkeypatch, mpimg, "imread")
    with pytest.raises(DataError, match=rf"bomb\.png of {BOMB_SIDE}x{BOMB_SIDE}"):
        load_image_folder(tmp_path, test_fraction=0.5)
    assert reads == []


def test_an_image_of_another_size_is_refused_naming_it_before_decoding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _png(tmp_path / "a" / "0.png", side=6)
    _png(tmp_path / "b" / "odd.png", side=6, height=5)
    loads = _counting(monkeypatch, ImageFile.ImageFile, "load")
    with pytest.raises(
        DataError, match=r"expected every image to be 6x6, got 5x6 in .*odd\.png"
    ) as raised:
        load_image_folder(tmp_path)
    assert "0.png" in str(raised.value)  # the first image, which set the size
    assert _decoded_names(loads) == {"0.png"}


# ---------------------------------------------------------------- symlinks
def test_class_folder_symlinked_outside_the_root_is_skipped_and_counted(tmp_path: Path) -> None:
    root = _classes(tmp_path / "root")
    _classes(tmp_path / "elsewhere", names=("secret",))
    _symlink(root / "secret", tmp_path / "elsewhere" / "secret")
    data = load_image_folder(root, test_fraction=0.5)
    assert data.class_names == ["a", "b"]
    assert data.train_images.shape[0] + data.test_images.shape[0] == 6
    assert data.skipped["outside_root"] == 1
    followed = load_image_folder(root, test_fraction=0.5, follow_symlinks=True)
    assert followed.class_names == ["a", "b", "secret"]
    assert followed.train_images.shape[0] + followed.test_images.shape[0] == 9
    assert followed.skipped["outside_root"] == 0


def test_image_file_symlinked_outside_the_root_is_skipped_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _classes(tmp_path / "root")
    outside = _png(tmp_path / "private" / "x.png", seed=99)
    _symlink(root / "a" / "link.png", outside)
    opened = _counting(monkeypatch, Image, "open")
    data = load_image_folder(root, test_fraction=0.5)
    assert data.skipped["outside_root"] == 1
    assert data.train_images.shape[0] + data.test_images.shape[0] == 6
    assert all(Path(str(p)).name != "link.png" for p in opened)


def test_symlinks_inside_the_root_are_followed(tmp_path: Path) -> None:
    root = _classes(tmp_path / "root")
    _symlink(root / "c", root / "b")  # a class folder linked to another one inside the root
    _symlink(root / "a" / "again.png", root / "a" / "0.png")
    data = load_image_folder(root, test_fraction=0.5)
    assert data.class_names == ["a", "b", "c"]
    assert data.train_images.shape[0] + data.test_images.shape[0] == 10
    assert data.skipped["outside_root"] == 0


def test_split_layout_with_a_test_class_outside_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    _classes(root / "train")
    _classes(root / "test", names=("a",))
    _classes(tmp_path / "elsewhere", names=("b",))
    _symlink(root / "test" / "b", tmp_path / "elsewhere" / "b")
    data = load_image_folder(root)
    assert data.test_labels.tolist() == [0, 0, 0]
    assert data.skipped["outside_root"] == 1


# ---------------------------------------------------------------- hidden and non-image files
def test_hidden_and_non_image_entries_are_skipped_with_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _classes(tmp_path)
    _png(root / "a" / ".hidden.png")
    _png(root / ".cache" / "0.png")  # a hidden folder is not a class
    (root / "a" / "notes.txt").write_text("not an image", encoding="utf-8")
    (root / "b" / "README").write_text("not an image", encoding="utf-8")
    (root / "b" / "nested.png").mkdir()  # a folder, whatever its name
    (root / "labels.csv").write_text("beside the classes: not part of the data", encoding="utf-8")
    _png(root / "b" / "upper.PNG", seed=7)
    _png(root / "b" / "tiff.tif", seed=8)
    opened = _counting(monkeypatch, Image, "open")
    data = load_image_folder(root, test_fraction=0.5)
    assert data.class_names == ["a", "b"]
    assert data.train_images.shape[0] + data.test_images.shape[0] == 8
    assert data.skipped == {"hidden": 2, "not_image": 3, "outside_root": 0, "corrupt": 0}
    assert set(data.skipped) == set(SKIP_REASONS)
    assert not any(Path(str(p)).name.startswith(".") for p in opened)


def test_clean_folder_reports_zero_skips_and_other_sources_none(tmp_path: Path) -> None:
    data = load_image_folder(_classes(tmp_path))
    assert data.skipped == dict.fromkeys(SKIP_REASONS, 0)
    tensors = TrainingData(
        torch.zeros(2, 1, 4, 4), torch.zeros(2), torch.zeros(1, 1, 4, 4), torch.zeros(1), ["x"]
    )
    assert tensors.skipped == {}
    assert data.normalized().skipped == data.skipped and data.limited(2).skipped == data.skipped


def test_error_for_a_folder_of_only_skipped_entries_says_what_was_skipped(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "notes.txt").write_text("x", encoding="utf-8")
    _png(tmp_path / "a" / ".x.png")
    with pytest.raises(
        DataError, match=r"expected image files .* found none \(skipped: 1 hidden, 1 not_image\)"
    ):
        load_image_folder(tmp_path)


# ---------------------------------------------------------------- corrupt files
def _corrupt_folder(root: Path) -> Path:
    _classes(root)
    (root / "a" / "fake.png").write_text("this is text, not a PNG", encoding="utf-8")
    whole = _png(root / "b" / "whole.png", seed=5).read_bytes()  # 8 x 8, as the others
    (root / "b" / "truncated.png").write_bytes(whole[: len(whole) // 2])
    (root / "b" / "whole.png").unlink()
    return root


def test_corrupt_image_error_names_the_file(tmp_path: Path) -> None:
    root = _corrupt_folder(tmp_path / "root")
    with pytest.raises(
        DataError, match=r"load_image_folder: .*corrupt file .*fake\.png.*on_corrupt='skip'"
    ):
        load_image_folder(root, test_fraction=0.5)
    (root / "a" / "fake.png").unlink()
    with pytest.raises(DataError, match=r"corrupt file .*truncated\.png"):
        load_image_folder(root, test_fraction=0.5)


def test_corrupt_images_are_skipped_and_counted_on_request(tmp_path: Path) -> None:
    root = _corrupt_folder(tmp_path / "root")
    data = load_image_folder(root, test_fraction=0.5, on_corrupt="skip")
    assert data.skipped["corrupt"] == 2
    assert data.train_images.shape[0] + data.test_images.shape[0] == 6
    assert data.input_shape == (1, 8, 8)


def test_corrupt_image_without_pillow_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _classes(tmp_path, per_class=1)
    (tmp_path / "a" / "fake.png").write_text("text", encoding="utf-8")
    _no_pillow(monkeypatch)
    with pytest.raises(DataError, match=r"corrupt file .*fake\.png"):
        load_image_folder(tmp_path, test_fraction=0.5)
    assert load_image_folder(tmp_path, test_fraction=0.5, on_corrupt="skip").skipped["corrupt"] == 1


def test_only_corrupt_images_is_an_error_even_when_skipping(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "0.png").write_text("text", encoding="utf-8")
    (tmp_path / "a" / "1.png").write_text("text", encoding="utf-8")
    with pytest.raises(DataError, match=r"expected a readable image .* \(skipped: 2 corrupt\)"):
        load_image_folder(tmp_path, on_corrupt="skip")


# ---------------------------------------------------------------- limits decode only what they keep
def test_limit_decodes_only_the_files_it_keeps_and_matches_a_full_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _classes(tmp_path, names=("a", "b", "c"), per_class=10)
    full = load_image_folder(root, seed=3)
    decoded = _counting(monkeypatch, _data, "_read_image")
    opened = _counting(monkeypatch, Image, "open")
    limited = load_image_folder(root, seed=3, limit=4)
    assert len(decoded) == 4 + 1 and len(opened) == 5  # 4 training, max(1, 4 // 3) test images
    expected = full.limited(4)
    for name in ("train_images", "train_labels", "test_images", "test_labels"):
        assert torch.equal(getattr(limited, name), getattr(expected, name)), name
    # the split is fixed by the seed and the sorted file list, so a limit takes the same files
    assert torch.equal(load_image_folder(root, seed=3, limit=4).train_images, limited.train_images)


def test_load_training_data_passes_the_limit_and_options_to_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _classes(tmp_path, per_class=12)
    full = load_training_data(root)
    decoded = _counting(monkeypatch, _data, "_read_image")
    data = load_training_data(root, limit=6)
    assert len(decoded) == 6 + 2
    assert torch.equal(data.train_images, full.limited(6).train_images)
    assert torch.equal(data.test_labels, full.limited(6).test_labels)
    with pytest.raises(DataError, match="max_image_pixels"):
        load_training_data(root, max_image_pixels=10)
    _png(root / "a" / "zz.png", side=9)  # another size: skipping corrupt files does not skip it
    with pytest.raises(DataError, match="expected every image to be 8x8"):
        load_training_data(root, on_corrupt="skip")


def test_split_layout_limit_decodes_only_the_first_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _classes(tmp_path / "train", per_class=6)
    _classes(tmp_path / "test", per_class=6)
    full = load_image_folder(tmp_path)
    decoded = _counting(monkeypatch, _data, "_read_image")
    data = load_image_folder(tmp_path, limit=3)
    assert len(decoded) == 3 + 1
    assert torch.equal(data.train_images, full.train_images[:3])
    assert torch.equal(data.test_images, full.test_images[:1])


def test_invalid_options_are_refused_naming_the_function(tmp_path: Path) -> None:
    root = _classes(tmp_path)
    with pytest.raises(DataError, match="load_image_folder: expected a positive limit, got 0"):
        load_image_folder(root, limit=0)
    with pytest.raises(
        DataError, match="load_image_folder: expected a positive max_image_pixels, got 0"
    ):
        load_image_folder(root, max_image_pixels=0)
    with pytest.raises(
        DataError, match="load_image_folder: expected on_corrupt 'error' or 'skip', got 'ignore'"
    ):
        load_image_folder(root, on_corrupt="ignore")  # type: ignore[arg-type]
    with pytest.raises(
        DataError, match=r"load_image_folder: expected 0 < test_fraction < 1, got 1\.5"
    ):
        load_image_folder(root, test_fraction=1.5)
