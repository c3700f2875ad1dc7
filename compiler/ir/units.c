/* units.c - the unit table; see units.h. */
#include "units.h"

#include <stdio.h>
#include <string.h>

#include "util.h"

const UnitInfo unit_table[] = {
    {"us", UNIT_TIME, 1e-3}, {"ms", UNIT_TIME, 1.0}, {"s", UNIT_TIME, 1e3},
    {"B", UNIT_SIZE, 1.0}, {"KiB", UNIT_SIZE, 1024.0}, {"MiB", UNIT_SIZE, 1048576.0},
    {"GiB", UNIT_SIZE, 1073741824.0}, {"TiB", UNIT_SIZE, 1099511627776.0},
    {"KB", UNIT_SIZE, 1e3}, {"MB", UNIT_SIZE, 1e6}, {"GB", UNIT_SIZE, 1e9},
    {"TB", UNIT_SIZE, 1e12},
};
const size_t unit_count = ARRAY_LEN(unit_table);

bool unit_lookup(const char *u, UnitClass *cls, double *factor)
{
    size_t n = strlen(u);
    bool bw = n > 2 && strcmp(u + n - 2, "/s") == 0;
    for (size_t i = 0; i < unit_count; i++) {
        size_t m = strlen(unit_table[i].name);
        if (m == n - (bw ? 2 : 0) && strncmp(u, unit_table[i].name, m) == 0) {
            if (bw && unit_table[i].cls != UNIT_SIZE)
                return false;
            *cls = bw ? UNIT_BW : unit_table[i].cls;
            *factor = unit_table[i].factor;
            return true;
        }
    }
    return false;
}

const char *unit_class_name(UnitClass c)
{
    switch (c) {
    case UNIT_TIME: return "a time";
    case UNIT_SIZE: return "a size";
    case UNIT_BW: return "a bandwidth";
    case UNIT_FRACTION:
    case UNIT_NONE: break;
    }
    return "a plain number";
}

char *unit_list(char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = 0;
    for (int pass = 0; pass < 2; pass++) {
        UnitClass want = pass == 0 ? UNIT_TIME : UNIT_SIZE;
        k += (size_t)snprintf(buf + k, k < n ? n - k : 0, "%s", pass == 0 ? "times:" : "; sizes:");
        for (size_t i = 0; i < unit_count; i++)
            if (unit_table[i].cls == want)
                k += (size_t)snprintf(buf + k, k < n ? n - k : 0, " %s", unit_table[i].name);
    }
    snprintf(buf + k, k < n ? n - k : 0, "; bandwidths: SIZE/s");
    return buf;
}
