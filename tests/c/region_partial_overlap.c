/* Partial, skewed and overlapping regions on a 2-D int object:
 *  - a write from a sub-box of a larger local buffer (local offset != 0) to a skewed remote box;
 *  - a local region whose shape differs from the remote one (same element count);
 *  - two overlapping writes in flight at once: the one waited last wins where they overlap;
 *  - never-written elements read back as 0. */
#include "pdc.h"
#include "check.h"
#include <string.h>

#define R 16
#define C 20

static pdcid_t transfer(void *buf, pdc_access_t a, pdcid_t obj, uint64_t *loff, uint64_t *lsz, uint64_t *roff,
                        uint64_t *rsz)
{
    pdcid_t l = PDCregion_create(2, loff, lsz), r = PDCregion_create(2, roff, rsz);
    CHECK_ID(l);
    CHECK_ID(r);
    pdcid_t t = PDCregion_transfer_create(buf, a, obj, l, r);
    CHECK_ID(t);
    CHECK_OK(PDCregion_close(l));
    CHECK_OK(PDCregion_close(r));
    return t;
}

static void read_all(pdcid_t obj, int *out)
{
    uint64_t zero[2] = {0, 0}, dims[2] = {R, C};
    pdcid_t t = transfer(out, PDC_READ, obj, zero, dims, zero, dims);
    CHECK_OK(PDCregion_transfer_start(t));
    CHECK_OK(PDCregion_transfer_wait(t));
    CHECK_OK(PDCregion_transfer_close(t));
}

int main(void)
{
    pdcid_t pdc = PDCinit("pdc");
    CHECK_ID(pdc);
    pdcid_t cprop = PDCprop_create(PDC_CONT_CREATE, pdc);
    pdcid_t cont = PDCcont_create_col("partial", cprop);
    CHECK_ID(cont);
    pdcid_t prop = PDCprop_create(PDC_OBJ_CREATE, pdc);
    uint64_t dims[2] = {R, C};
    CHECK_OK(PDCprop_set_obj_dims(prop, 2, dims));
    CHECK_OK(PDCprop_set_obj_type(prop, PDC_INT));
    pdcid_t obj = PDCobj_create(cont, "partial/grid", prop);
    CHECK_ID(obj);

    int expect[R][C];
    memset(expect, 0, sizeof expect);

    /* 1. Local sub-box [2:5, 3:7] of a 5x7 buffer -> remote box at [9:12, 11:15]. */
    {
        int buf[5][7];
        for (int i = 0; i < 5; i++)
            for (int j = 0; j < 7; j++)
                buf[i][j] = 1000 + i * 10 + j;
        uint64_t loff[2] = {2, 3}, lsz[2] = {3, 4}, roff[2] = {9, 11}, rsz[2] = {3, 4};
        pdcid_t t = transfer(buf, PDC_WRITE, obj, loff, lsz, roff, rsz);
        CHECK_OK(PDCregion_transfer_start(t));
        memset(buf, 0xff, sizeof buf); /* the buffer is reusable right after start */
        CHECK_OK(PDCregion_transfer_wait(t));
        CHECK_OK(PDCregion_transfer_close(t));
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++)
                expect[9 + i][11 + j] = 1000 + (2 + i) * 10 + (3 + j);
    }
    /* 2. Reshaping: a 1x12 local row into a 4x3 remote box at [0:4, 17:20]. */
    {
        int row[12];
        for (int k = 0; k < 12; k++)
            row[k] = 2000 + k;
        uint64_t loff[2] = {0, 0}, lsz[2] = {1, 12}, roff[2] = {0, 17}, rsz[2] = {4, 3};
        pdcid_t t = transfer(row, PDC_WRITE, obj, loff, lsz, roff, rsz);
        CHECK_OK(PDCregion_transfer_start(t));
        CHECK_OK(PDCregion_transfer_wait(t));
        CHECK_OK(PDCregion_transfer_close(t));
        for (int k = 0; k < 12; k++)
            expect[k / 3][17 + k % 3] = 2000 + k;
    }
    /* 3. Overlapping writes A=[4:10, 0:8] (value 7) and B=[6:12, 5:10] (value 9) both in
     * flight; B is waited after A, so B wins on the overlap [6:10, 5:8]. */
    {
        int a[6 * 8], b[6 * 5];
        for (int k = 0; k < 48; k++)
            a[k] = 7;
        for (int k = 0; k < 30; k++)
            b[k] = 9;
        uint64_t z[2] = {0, 0}, asz[2] = {6, 8}, aoff[2] = {4, 0}, bsz[2] = {6, 5}, boff[2] = {6, 5};
        pdcid_t ta = transfer(a, PDC_WRITE, obj, z, asz, aoff, asz);
        pdcid_t tb = transfer(b, PDC_WRITE, obj, z, bsz, boff, bsz);
        pdcid_t both[2] = {tb, ta};
        CHECK_OK(PDCregion_transfer_start_all(both, 2));
        CHECK_OK(PDCregion_transfer_wait(ta));
        CHECK_OK(PDCregion_transfer_wait(tb));
        for (int i = 4; i < 10; i++)
            for (int j = 0; j < 8; j++)
                expect[i][j] = 7;
        for (int i = 6; i < 12; i++)
            for (int j = 5; j < 10; j++)
                expect[i][j] = 9;
        int got[R][C];
        read_all(obj, &got[0][0]);
        CHECK(got[7][6] == 9 && got[5][6] == 7 && got[11][9] == 9);
        /* Now the other order: wait A last, so A wins on the overlap. */
        CHECK_OK(PDCregion_transfer_start_all(both, 2));
        CHECK_OK(PDCregion_transfer_wait(tb));
        CHECK_OK(PDCregion_transfer_wait(ta));
        for (int i = 4; i < 10; i++)
            for (int j = 0; j < 8; j++)
                expect[i][j] = 7;
        CHECK_OK(PDCregion_transfer_close(ta));
        CHECK_OK(PDCregion_transfer_close(tb));
    }
    /* 4. Read a skewed box into the middle of a larger local buffer: the rest stays untouched. */
    {
        int buf[6][9];
        for (int i = 0; i < 6; i++)
            for (int j = 0; j < 9; j++)
                buf[i][j] = -1;
        uint64_t loff[2] = {1, 2}, lsz[2] = {5, 7}, roff[2] = {7, 4}, rsz[2] = {5, 7};
        pdcid_t t = transfer(buf, PDC_READ, obj, loff, lsz, roff, rsz);
        CHECK_OK(PDCregion_transfer_start(t));
        CHECK_OK(PDCregion_transfer_wait(t));
        CHECK_OK(PDCregion_transfer_close(t));
        for (int i = 0; i < 6; i++)
            for (int j = 0; j < 9; j++) {
                int inside = i >= 1 && j >= 2;
                CHECK(buf[i][j] == (inside ? expect[7 + i - 1][4 + j - 2] : -1));
            }
    }
    int got[R][C];
    read_all(obj, &got[0][0]);
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++)
            if (got[i][j] != expect[i][j]) {
                fprintf(stderr, "mismatch at [%d][%d]: got %d want %d\n", i, j, got[i][j], expect[i][j]);
                return 1;
            }
    CHECK_OK(PDCobj_close(obj));
    CHECK_OK(PDCprop_close(prop));
    CHECK_OK(PDCcont_close(cont));
    CHECK_OK(PDCprop_close(cprop));
    CHECK_OK(PDCclose(pdc));
    printf("region_partial_overlap: ok\n");
    return 0;
}
