"""Synthetic input for the Montage mosaic benchmark: N overlapping TAN-projected sky images.

    python3 bench/montage/sky.py OUTDIR [--images 12] [--size 512] [--seed 1]

Why synthetic: the benchmark measures I/O paths (plain files vs. the pdcx CFITSIO driver),
so the inputs must be small, reproducible and free of downloads, yet exercise every stage of
the background-matched pipeline for real:

* the images tile a grid with ~25% overlap between neighbours (and a small rotation each),
  so mOverlaps finds real pairs and mProjExec has to reproject, not just copy;
* every image sees the same stars at the same sky positions, so overlaps agree on the
  signal and only differ in background, which is what mDiffExec/mFitExec measure;
* every image gets its own background (constant + small linear plane), so mBgModel has
  something to fix and the effect of background matching is measurable;
* the noise comes from a seeded numpy generator, so one seed gives byte-identical files.

Images are written as float32 primary HDUs, ``img_000.fits`` ... with a WCS built by
astropy.wcs (RA---TAN/DEC--TAN, FK5 J2000, CDELT of 1 arcsec/pixel, rotation in PC).
"""

from __future__ import annotations

import argparse
import math
import os

import numpy as np
from astropy.io import fits
from astropy.wcs import WCS

#: Sky position of the mosaic centre, degrees (RA, Dec).
CENTER = (180.0, 30.0)
#: Pixel scale, degrees per pixel (1 arcsec).
SCALE = 1.0 / 3600.0
#: Fraction of an image's width shared with its grid neighbour.
OVERLAP = 0.25
#: Maximum rotation of an image relative to the mosaic grid, degrees.
MAX_ROT = 2.0
#: Star density: number of stars per input-image area.
STARS_PER_IMAGE = 150
#: Gaussian PSF sigma, pixels.
PSF_SIGMA = 1.5
#: Standard deviation of the per-pixel noise.
NOISE = 0.5


def grid_shape(images: int) -> tuple[int, int]:
    """Columns and rows of a near-square grid holding ``images`` tiles (the last row may be partial)."""
    rows = max(1, math.isqrt(images))
    cols = math.ceil(images / rows)
    return cols, rows


def tan_wcs(crval: tuple[float, float], crpix: tuple[float, float], rot_deg: float = 0.0) -> WCS:
    """A TAN WCS with 1 arcsec pixels, North up / East left, rotated by ``rot_deg``.

    The rotation lives in the PC matrix (with CDELT carrying the scale) because that is the
    FITS-standard form astropy writes and Montage's WCS library reads.
    """
    w = WCS(naxis=2)
    w.wcs.ctype = ["RA---TAN", "DEC--TAN"]
    w.wcs.crval = list(crval)
    w.wcs.crpix = list(crpix)
    w.wcs.cdelt = [-SCALE, SCALE]
    c, s = math.cos(math.radians(rot_deg)), math.sin(math.radians(rot_deg))
    w.wcs.pc = [[c, -s], [s, c]]
    w.wcs.radesys = "FK5"
    w.wcs.equinox = 2000.0
    w.wcs.cunit = ["deg", "deg"]
    return w


def render(
    size: int,
    xs: np.ndarray,
    ys: np.ndarray,
    fluxes: np.ndarray,
    sigma: float = PSF_SIGMA,
) -> np.ndarray:
    """Sum of Gaussian point sources at 0-based pixel positions (``xs``, ``ys``).

    Each star is drawn only into a small box around it (±5 sigma): drawing full-frame
    Gaussians would cost size² per star and make generation, not the pipeline, the slow part.
    """
    img = np.zeros((size, size), dtype=np.float64)
    half = math.ceil(5 * sigma)
    for x, y, f in zip(xs, ys, fluxes):
        x0, x1 = max(0, math.floor(x) - half), min(size, math.floor(x) + half + 2)
        y0, y1 = max(0, math.floor(y) - half), min(size, math.floor(y) + half + 2)
        if x0 >= x1 or y0 >= y1:
            continue
        gx = np.exp(-0.5 * ((np.arange(x0, x1) - x) / sigma) ** 2)
        gy = np.exp(-0.5 * ((np.arange(y0, y1) - y) / sigma) ** 2)
        img[y0:y1, x0:x1] += f / (2 * math.pi * sigma**2) * np.outer(gy, gx)
    return img


def generate(outdir: str, images: int = 12, size: int = 512, seed: int = 1) -> list[str]:
    """Write ``images`` synthetic ``size``×``size`` FITS images into ``outdir``.

    Returns the paths written, in order. The same arguments always give byte-identical files.
    """
    if images < 1 or size < 16:
        raise ValueError("need images >= 1 and size >= 16")
    rng = np.random.default_rng(seed)
    os.makedirs(outdir, exist_ok=True)

    cols, rows = grid_shape(images)
    step = size * (1.0 - OVERLAP)  # pixels between neighbouring tile centres
    # One global tangent plane around CENTER places the tiles and the stars; its pixel grid
    # has the same scale as the images and is large enough for the whole mosaic plus margin.
    width, height = step * (cols - 1) + size, step * (rows - 1) + size
    glob = tan_wcs(CENTER, ((width + 1) / 2, (height + 1) / 2))

    nstars = int(STARS_PER_IMAGE * width * height / size**2)
    sx = rng.uniform(-10, width + 10, nstars)
    sy = rng.uniform(-10, height + 10, nstars)
    # Power-law-ish flux distribution: many faint stars, a few bright ones.
    flux = 200.0 * (1.0 + rng.pareto(1.5, nstars))
    star_ra, star_dec = glob.wcs_pix2world(sx, sy, 0)

    paths = []
    for i in range(images):
        col, row = i % cols, i // cols
        # 0-based centre of the tile in the global plane, then its sky position.
        gx, gy = size / 2 - 0.5 + col * step, size / 2 - 0.5 + row * step
        ra, dec = (float(v) for v in glob.wcs_pix2world(gx, gy, 0))
        rot = float(rng.uniform(-MAX_ROT, MAX_ROT))
        w = tan_wcs((ra, dec), ((size + 1) / 2, (size + 1) / 2), rot)

        px, py = w.wcs_world2pix(star_ra, star_dec, 0)
        inside = (px > -10) & (px < size + 10) & (py > -10) & (py < size + 10)
        data = render(size, px[inside], py[inside], flux[inside])

        # Per-image background: offset plus a gentle plane (a few counts across the image),
        # the thing mDiffExec/mFitExec/mBgModel are there to remove.
        offset = rng.uniform(50.0, 150.0)
        ax, ay = rng.uniform(-0.01, 0.01, 2)
        yy, xx = np.mgrid[0:size, 0:size]
        data += offset + ax * (xx - size / 2) + ay * (yy - size / 2)
        data += rng.normal(0.0, NOISE, data.shape)

        header = w.to_header()
        header["BUNIT"] = "counts"
        header["OBJECT"] = f"synthetic tile {i}"
        header["BGOFFSET"] = (float(offset), "injected background constant")
        header["BGSLOPEX"] = (float(ax), "injected background d/dx per pixel")
        header["BGSLOPEY"] = (float(ay), "injected background d/dy per pixel")
        path = os.path.join(outdir, f"img_{i:03d}.fits")
        fits.PrimaryHDU(data.astype(np.float32), header=header).writeto(path, overwrite=True)
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point: generate the images and list them."""
    p = argparse.ArgumentParser(
        description="Generate overlapping synthetic TAN-projected FITS sky images "
        "(common stars, per-image background plane, seeded noise) for the Montage benchmark.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("outdir", help="directory to write img_000.fits ... into (created if missing)")
    p.add_argument("--images", type=int, default=12, help="number of images, tiled in a near-square grid")
    p.add_argument("--size", type=int, default=512, help="width and height of each image, pixels")
    p.add_argument("--seed", type=int, default=1, help="RNG seed; same seed gives byte-identical files")
    a = p.parse_args(argv)
    for path in generate(a.outdir, a.images, a.size, a.seed):
        print(path)


if __name__ == "__main__":
    main()
