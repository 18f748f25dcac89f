/*
 * phdf5: an ordinary parallel HDF5 program (HDF5 over MPI-IO, knows nothing about pdcx).
 *
 *   mpirun -n 4 ./phdf5 PATH [N]
 *
 * Creates PATH with H5Pset_fapl_mpio and, over 3 steps, writes
 *   /contig   float64 [ranks*N], contiguous: rank r owns [r*N, (r+1)*N); rewritten every step,
 *             collectively in steps 0 and 2, independently in step 1
 *   /chunked  int32 [3][ranks*N], chunks [1][N]: step s writes row s, independently in
 *             steps 0 and 2, collectively in step 1
 *   /extra    int64 [ranks], created in step 1 (new metadata in the middle of the run)
 *   attributes: "step" (int) on the root group, rewritten every step; "title" (string) on
 *             the root group, written once; "scale" (float64) on /contig, rewritten every step
 * and calls H5Fflush(H5F_SCOPE_GLOBAL) after each step (MPI_File_sync underneath), then
 * closes. N defaults to 65536 (512 KiB of /contig per rank).
 *
 * Values are deterministic (rank, step, index), and dataset creation times are not tracked,
 * so two runs write byte-identical files. Every HDF5 call is checked; a failure prints the
 * call and aborts with exit status 1. Rank 0 prints "phdf5 ok" at the end.
 */
#include <hdf5.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 3

static int rank, nranks;

#define H(call)                                                                             \
    ({                                                                                      \
        __typeof__(call) v_ = (call);                                                       \
        if (v_ < 0) die(#call, __LINE__);                                                   \
        v_;                                                                                 \
    })

static void die(const char *what, int line) {
    fprintf(stderr, "phdf5: rank %d: line %d: %s failed\n", rank, line, what);
    H5Eprint2(H5E_DEFAULT, stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

static hid_t xfer(int collective) {
    hid_t dxpl = H(H5Pcreate(H5P_DATASET_XFER));
    H(H5Pset_dxpl_mpio(dxpl, collective ? H5FD_MPIO_COLLECTIVE : H5FD_MPIO_INDEPENDENT));
    return dxpl;
}

static void set_attr(hid_t obj, const char *name, hid_t type, const void *val) {
    hid_t space = H(H5Screate(H5S_SCALAR));
    hid_t a = H5Aexists(obj, name) > 0 ? H(H5Aopen(obj, name, H5P_DEFAULT))
                                       : H(H5Acreate2(obj, name, type, space, H5P_DEFAULT,
                                                      H5P_DEFAULT));
    H(H5Awrite(a, type, val));
    H(H5Aclose(a));
    H(H5Sclose(space));
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (argc < 2) {
        if (rank == 0) fprintf(stderr, "usage: phdf5 PATH [N]\n");
        MPI_Finalize();
        return 2;
    }
    const char *path = argv[1];
    hsize_t n = argc > 2 ? strtoull(argv[2], NULL, 10) : 65536;
    if (n == 0) {
        fprintf(stderr, "phdf5: N must be positive\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    hsize_t total = n * (hsize_t)nranks, mine = n * (hsize_t)rank;

    hid_t fapl = H(H5Pcreate(H5P_FILE_ACCESS));
    H(H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL));
    hid_t file = H(H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl));
    H(H5Pclose(fapl));

    /* Creation times would make two runs differ. */
    hid_t dcpl = H(H5Pcreate(H5P_DATASET_CREATE));
    H(H5Pset_obj_track_times(dcpl, 0));
    hid_t cspace = H(H5Screate_simple(1, &total, NULL));
    hid_t contig = H(H5Dcreate2(file, "contig", H5T_NATIVE_DOUBLE, cspace, H5P_DEFAULT, dcpl,
                                H5P_DEFAULT));
    hsize_t kdims[2] = {STEPS, total}, kchunk[2] = {1, n};
    hid_t kdcpl = H(H5Pcopy(dcpl));
    H(H5Pset_chunk(kdcpl, 2, kchunk));
    hid_t kspace = H(H5Screate_simple(2, kdims, NULL));
    hid_t chunked = H(H5Dcreate2(file, "chunked", H5T_NATIVE_INT32, kspace, H5P_DEFAULT, kdcpl,
                                 H5P_DEFAULT));
    H(H5Pclose(kdcpl));

    hid_t strtype = H(H5Tcopy(H5T_C_S1));
    H(H5Tset_size(strtype, 32));
    char title[32] = "pdcx phdf5 test";
    set_attr(file, "title", strtype, title);

    double *d = malloc(n * sizeof *d);
    int32_t *k = malloc(n * sizeof *k);
    if (!d || !k) die("malloc", __LINE__);
    hid_t extra = -1;
    for (int s = 0; s < STEPS; s++) {
        for (hsize_t i = 0; i < n; i++) {
            d[i] = (double)(mine + i) * 0.25 + s * 1000.0 + rank;
            k[i] = (int32_t)((mine + i) * 7 + (hsize_t)s * 100000 + (hsize_t)rank * 13);
        }
        hid_t mspace = H(H5Screate_simple(1, &n, NULL));

        hid_t fs = H(H5Dget_space(contig));
        H(H5Sselect_hyperslab(fs, H5S_SELECT_SET, &mine, NULL, &n, NULL));
        hid_t dx = xfer(s != 1);
        H(H5Dwrite(contig, H5T_NATIVE_DOUBLE, mspace, fs, dx, d));
        H(H5Pclose(dx));
        H(H5Sclose(fs));

        fs = H(H5Dget_space(chunked));
        hsize_t start[2] = {(hsize_t)s, mine}, count[2] = {1, n};
        H(H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL));
        dx = xfer(s == 1);
        H(H5Dwrite(chunked, H5T_NATIVE_INT32, mspace, fs, dx, k));
        H(H5Pclose(dx));
        H(H5Sclose(fs));
        H(H5Sclose(mspace));

        if (s == 1) {
            hsize_t en = (hsize_t)nranks, one = 1, me = (hsize_t)rank;
            hid_t es = H(H5Screate_simple(1, &en, NULL));
            extra = H(H5Dcreate2(file, "extra", H5T_NATIVE_INT64, es, H5P_DEFAULT, dcpl,
                                 H5P_DEFAULT));
            H(H5Sselect_hyperslab(es, H5S_SELECT_SET, &me, NULL, &one, NULL));
            hid_t ms = H(H5Screate_simple(1, &one, NULL));
            int64_t v = 1000000007LL * (rank + 1);
            dx = xfer(1);
            H(H5Dwrite(extra, H5T_NATIVE_INT64, ms, es, dx, &v));
            H(H5Pclose(dx));
            H(H5Sclose(ms));
            H(H5Sclose(es));
        }

        /* Attribute writes are collective metadata operations: every rank, same value. */
        int step = s;
        set_attr(file, "step", H5T_NATIVE_INT, &step);
        double scale = 0.5 * (s + 1);
        set_attr(contig, "scale", H5T_NATIVE_DOUBLE, &scale);
        H(H5Fflush(file, H5F_SCOPE_GLOBAL));
    }
    H(H5Dclose(extra));
    H(H5Dclose(chunked));
    H(H5Dclose(contig));
    H(H5Sclose(kspace));
    H(H5Sclose(cspace));
    H(H5Tclose(strtype));
    H(H5Pclose(dcpl));
    H(H5Fclose(file));
    free(d);
    free(k);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("phdf5 ok\n");
    MPI_Finalize();
    return 0;
}
