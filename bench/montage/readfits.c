/* Reads each FITS image named on the command line whole with CFITSIO (open, read every
 * pixel, close): what bench/montage/run.py runs under libpdcx_fits.so to count the round
 * trips one file costs. Prints the sum of the pixels so the reads cannot be skipped. */
#include <fitsio.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    double sum = 0;
    for (int i = 1; i < argc; i++) {
        fitsfile *f;
        int status = 0, naxis = 0, anynul = 0;
        long naxes[3] = {1, 1, 1};
        if (fits_open_file(&f, argv[i], READONLY, &status) ||
            fits_get_img_dim(f, &naxis, &status) ||
            fits_get_img_size(f, 3, naxes, &status)) {
            fits_report_error(stderr, status);
            return 1;
        }
        long n = naxes[0] * naxes[1] * naxes[2];
        double *px = malloc(sizeof(double) * (size_t)n);
        if (!px || fits_read_img(f, TDOUBLE, 1, n, NULL, px, &anynul, &status) ||
            fits_close_file(f, &status)) {
            fits_report_error(stderr, status);
            return 1;
        }
        for (long k = 0; k < n; k++)
            if (px[k] == px[k])
                sum += px[k];
        free(px);
    }
    printf("%g\n", sum);
    return 0;
}
