/*
 * Parallel-HDF5 helpers of the baseline kernels in bench/c, the _hdf5.c files.
 * Files are opened with the MPI-IO virtual file driver (H5Pset_fapl_mpio);
 * bulk data moves with collective MPI-IO (H5FD_MPIO_COLLECTIVE), as the
 * original VPIC-IO / BD-CATS-IO HDF5 kernels do. Probes that issue one small
 * write per operation use independent MPI-IO (stated where used).
 */
#ifndef PDCX_BENCH_H5COMMON_H
#define PDCX_BENCH_H5COMMON_H

#include "common.h"
#include <hdf5.h>

/* Every HDF5 call returns a negative hid_t/herr_t on failure. */
#define H5OK(call)                                                                                        \
    do {                                                                                                     \
        if ((call) < 0)                                                                                      \
            die("%s:%d: %s failed", __FILE__, __LINE__, #call);                                              \
    } while (0)

/* hid_t-returning call: assigns and checks. */
#define H5ID(var, call)                                                                                      \
    do {                                                                                                     \
        (var) = (call);                                                                                      \
        if ((var) < 0)                                                                                       \
            die("%s:%d: %s failed", __FILE__, __LINE__, #call);                                              \
    } while (0)

static inline hid_t h5_native(vtype_t t)
{
    switch (t) {
        case VT_F32: return H5T_NATIVE_FLOAT;
        case VT_I32: return H5T_NATIVE_INT32;
        case VT_I64: return H5T_NATIVE_INT64;
        case VT_U16: return H5T_NATIVE_UINT16;
    }
    return -1;
}

/* File access property list: MPI-IO driver on MPI_COMM_WORLD, collective metadata. */
static inline hid_t h5_fapl_mpio(void)
{
    hid_t fapl;
    H5ID(fapl, H5Pcreate(H5P_FILE_ACCESS));
    H5OK(H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL));
    H5OK(H5Pset_all_coll_metadata_ops(fapl, 1));
    H5OK(H5Pset_coll_metadata_write(fapl, 1));
    return fapl;
}

/* Data transfer property list: collective or independent MPI-IO. */
static inline hid_t h5_dxpl(int collective)
{
    hid_t dxpl;
    H5ID(dxpl, H5Pcreate(H5P_DATASET_XFER));
    H5OK(H5Pset_dxpl_mpio(dxpl, collective ? H5FD_MPIO_COLLECTIVE : H5FD_MPIO_INDEPENDENT));
    return dxpl;
}

static inline void h5_path(char *out, size_t n, const char *dir, const char *file)
{
    int w = snprintf(out, n, "%s/%s", dir, file);
    if (w < 0 || (size_t)w >= n)
        die("path too long: %s/%s", dir, file);
}

/*
 * Create the 1-D dataset loc/name of `total` elements (contiguous, no fill)
 * and write elements [start, start+count) from buf with dxpl.
 */
static inline void h5_write_1d(hid_t loc, const char *name, vtype_t t, uint64_t total, uint64_t start,
                               uint64_t count, const void *buf, hid_t dxpl)
{
    hid_t   fspace, mspace, dcpl, dset;
    hsize_t dims[1] = {(hsize_t)total}, off[1] = {(hsize_t)start}, cnt[1] = {(hsize_t)count};
    H5ID(fspace, H5Screate_simple(1, dims, NULL));
    H5ID(dcpl, H5Pcreate(H5P_DATASET_CREATE));
    H5OK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));
    H5ID(dset, H5Dcreate2(loc, name, h5_native(t), fspace, H5P_DEFAULT, dcpl, H5P_DEFAULT));
    H5ID(mspace, H5Screate_simple(1, cnt, NULL));
    H5OK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, off, NULL, cnt, NULL));
    H5OK(H5Dwrite(dset, h5_native(t), mspace, fspace, dxpl, buf));
    H5OK(H5Sclose(mspace));
    H5OK(H5Dclose(dset));
    H5OK(H5Pclose(dcpl));
    H5OK(H5Sclose(fspace));
}

/* Read elements [start, start+count) of the 1-D dataset loc/name into buf; checks its length. */
static inline void h5_read_1d(hid_t loc, const char *name, vtype_t t, uint64_t total, uint64_t start,
                              uint64_t count, void *buf, hid_t dxpl)
{
    hid_t   fspace, mspace, dset;
    hsize_t dims[1] = {0}, off[1] = {(hsize_t)start}, cnt[1] = {(hsize_t)count};
    H5ID(dset, H5Dopen2(loc, name, H5P_DEFAULT));
    H5ID(fspace, H5Dget_space(dset));
    if (H5Sget_simple_extent_ndims(fspace) != 1)
        die("dataset %s is not 1-D", name);
    H5OK(H5Sget_simple_extent_dims(fspace, dims, NULL));
    if (dims[0] != (hsize_t)total)
        die("dataset %s has %llu elements, expected %llu", name, (unsigned long long)dims[0],
            (unsigned long long)total);
    H5ID(mspace, H5Screate_simple(1, cnt, NULL));
    H5OK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, off, NULL, cnt, NULL));
    H5OK(H5Dread(dset, h5_native(t), mspace, fspace, dxpl, buf));
    H5OK(H5Sclose(mspace));
    H5OK(H5Sclose(fspace));
    H5OK(H5Dclose(dset));
}

/* Rank 0 fsyncs the file (untimed by the caller's phase; returns its own duration, max over ranks). */
static inline double fsync_file(const char *path)
{
    int    rank = 0;
    double t0, t = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    t0 = now();
    if (rank == 0) {
        int fd = open(path, O_RDONLY);
        if (fd < 0)
            die("open %s: %s", path, strerror(errno));
        if (fsync(fd) != 0)
            die("fsync %s: %s", path, strerror(errno));
        if (close(fd) != 0)
            die("close %s: %s", path, strerror(errno));
    }
    t = now() - t0;
    return max_all(t);
}

#endif /* PDCX_BENCH_H5COMMON_H */
