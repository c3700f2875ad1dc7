/* human.c - see human.h. */
#include "human.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Three significant digits, at least none and at most two decimals. */
static int decimals(double a)
{
    return a >= 100 ? 0 : a >= 10 ? 1 : 2;
}

double human_fix(double x, int decimals)
{
    char t[400];
    if (!isfinite(x))
        return x;
    snprintf(t, sizeof t, "%.*f", decimals, fabs(x));
    return strtod(t, NULL) == 0 ? 0 : x;
}

char *human_ms(char *buf, size_t n, double ms)
{
    double a = fabs(ms);
    if (!isfinite(ms))
        snprintf(buf, n, "-");
    else if (a == 0)
        snprintf(buf, n, "0 ms");
    else if (a < 1)
        snprintf(buf, n, "%.*f us", decimals(a * 1000), human_fix(ms * 1000, decimals(a * 1000)));
    else if (a < 1000)
        snprintf(buf, n, "%.*f ms", decimals(a), ms);
    else
        snprintf(buf, n, "%.*f s", decimals(a / 1000), ms / 1000);
    return buf;
}

char *human_size(char *buf, size_t n, double bytes)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    double x = bytes;
    while (fabs(x) >= 1024 && u < 5) {
        x /= 1024;
        u++;
    }
    if (!isfinite(bytes))
        snprintf(buf, n, "-");
    else if (u == 0)
        snprintf(buf, n, "%.0f B", human_fix(x, 0));
    else
        snprintf(buf, n, "%.1f %s", x, unit[u]);
    return buf;
}
