/*
 * Metadata probe, parallel HDF5 baseline: M (-m, default 20000) groups in
 * one file DIR/meta.h5, each with an int attribute "step" = i % 100.
 * Parallel HDF5 requires metadata-modifying calls to be collective, so every
 * rank calls H5Gcreate/H5Acreate for every group (collective metadata I/O,
 * latest file format). Timed: H5Fcreate .. H5Fclose; creates/s = M / time.
 * Query: rank 0 reopens the file and visits every group, reading "step", and
 * counts step == 42 (HDF5 has no index; this is the scan an application does).
 * -M create: the counterpart of the PDC kernel's bare creates: M datasets of one int32
 * element each (H5Dcreate2 + H5Dclose, what PDCobj_create + PDCobj_close stand for) in one
 * file, from every rank collectively (run it with 1 rank); timed H5Fcreate .. H5Fclose, no
 * fsync (HDF5 makes them durable only at a flush the application adds).
 */
#include "h5common.h"

/* -M create: M one-element datasets; returns the seconds. */
static double dataset_creates(const char *path, uint64_t n)
{
    hid_t    fapl, file, space, dset;
    hsize_t  one = 1;
    char     name[64];
    uint64_t i;
    double   t0 = phase_start();
    fapl        = h5_fapl_mpio();
    H5OK(H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST));
    H5ID(file, H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl));
    H5ID(space, H5Screate_simple(1, &one, NULL));
    for (i = 0; i < n; i++) {
        snprintf(name, sizeof(name), "d%08" PRIu64, i);
        H5ID(dset, H5Dcreate2(file, name, H5T_NATIVE_INT32, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
        H5OK(H5Dclose(dset));
    }
    H5OK(H5Sclose(space));
    H5OK(H5Fclose(file));
    H5OK(H5Pclose(fapl));
    return max_all(now() - t0);
}

typedef struct {
    int      want;
    uint64_t matches, visited;
} scan_t;

static herr_t scan_cb(hid_t loc, const char *name, const H5L_info_t *info, void *op)
{
    scan_t *sc = (scan_t *)op;
    hid_t   attr;
    int     val = -1;
    (void)info;
    attr = H5Aopen_by_name(loc, name, "step", H5P_DEFAULT, H5P_DEFAULT);
    if (attr < 0)
        return -1;
    if (H5Aread(attr, H5T_NATIVE_INT, &val) < 0) {
        H5Aclose(attr);
        return -1;
    }
    if (H5Aclose(attr) < 0)
        return -1;
    sc->visited++;
    if (val == sc->want)
        sc->matches++;
    return 0;
}

int main(int argc, char **argv)
{
    bench_opts_t o;
    int          rank, size;
    uint64_t     i, expect = 0;
    hid_t        fapl, fcpl, file, grp, aspace, attr;
    char         path[4096], name[64];
    double       t0, t, tq = 0;
    scan_t       sc = {42, 0, 0};

    MPI_CHECK(MPI_Init(&argc, &argv));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    opts_parse(argc, argv, &o, "metadata probe, parallel HDF5 (-m groups, default 20000; file DIR/meta.h5)\n");
    h5_path(path, sizeof(path), o.dir, "meta.h5");
    if (o.mode != NULL) {
        if (strcmp(o.mode, "create") != 0)
            die("-M %s: the only mode is 'create'", o.mode);
        t = dataset_creates(path, o.objects);
        report("meta", "hdf5", 0, t, "objects=%" PRIu64 " creates_per_s=%.0f mode=dataset-create", o.objects,
               (double)o.objects / t);
        MPI_CHECK(MPI_Finalize());
        return 0;
    }

    t0   = phase_start();
    fapl = h5_fapl_mpio();
    H5OK(H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST));
    H5ID(fcpl, H5Pcreate(H5P_FILE_CREATE));
    H5ID(file, H5Fcreate(path, H5F_ACC_TRUNC, fcpl, fapl));
    H5ID(aspace, H5Screate(H5S_SCALAR));
    for (i = 0; i < o.objects; i++) {
        int step = (int)(i % 100);
        snprintf(name, sizeof(name), "g%08" PRIu64, i);
        H5ID(grp, H5Gcreate2(file, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
        H5ID(attr, H5Acreate2(grp, "step", H5T_NATIVE_INT, aspace, H5P_DEFAULT, H5P_DEFAULT));
        H5OK(H5Awrite(attr, H5T_NATIVE_INT, &step));
        H5OK(H5Aclose(attr));
        H5OK(H5Gclose(grp));
        if (step == 42)
            expect++;
    }
    H5OK(H5Sclose(aspace));
    H5OK(H5Fclose(file));
    H5OK(H5Pclose(fcpl));
    H5OK(H5Pclose(fapl));
    t = max_all(now() - t0);

    if (rank == 0) {
        hsize_t idx = 0;
        t0          = now();
        H5ID(file, H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT));
        H5OK(H5Literate(file, H5_INDEX_NAME, H5_ITER_NATIVE, &idx, scan_cb, &sc));
        H5OK(H5Fclose(file));
        tq = now() - t0;
        if (sc.matches != expect || sc.visited != o.objects)
            die("query found %" PRIu64 " of %" PRIu64 " expected matches, visited %" PRIu64 " of %" PRIu64, sc.matches,
                expect, sc.visited, o.objects);
    }
    report("meta", "hdf5", 0, t,
           "objects=%" PRIu64 " creates_per_s=%.0f query=scan query_s=%.6f query_matches=%" PRIu64
           " mode=collective-metadata",
           o.objects, (double)o.objects / t, tq, sc.matches);
    MPI_CHECK(MPI_Finalize());
    return 0;
}
