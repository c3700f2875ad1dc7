/* cmd_csv.c - the commands `pipec import-csv` and `pipec export-csv`: their options and
 * output files, over the PyTorch schedule CSV reader and writer of csv.c. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "csv.h"
#include "driver.h"
#include "print.h"

/* pipec import-csv F.csv [-o OUT.pipe] [--name NAME] */
int cmd_import_csv(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"output", required_argument, NULL, 'o'},
        {"name", required_argument, NULL, 'n'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *out = NULL, *name = NULL;
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "o:n:h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'o':
            out = optarg;
            break;
        case 'n':
            name = optarg;
            break;
        default:
            return driver_usage_status("import-csv", opt == 'h');
        }
    }
    int st = driver_operands(argc, "import-csv", 1);
    if (st >= 0)
        return st;
    const char *path = argv[optind];
    size_t len;
    char *text = read_file(path, &len);
    if (!text) {
        fprintf(stderr, "pipec: cannot read %s: %s\n", strcmp(path, "-") ? path : "standard input",
                strerror(errno));
        return 1;
    }
    if (len > UINT32_MAX - 1) {
        free(text);
        fprintf(stderr, "pipec: %s: error[limit]: larger than 4 GiB\n", path);
        return 1;
    }
    Diag d = {0};
    bool std_in = strcmp(path, "-") == 0;
    uint32_t file = diag_add_file(&d, path, text, (uint32_t)len);
    if (std_in)
        diag_set_name(&d, file, "<stdin>");
    char *autoname = name ? NULL : csv_name_from_path(std_in ? "stdin" : path);
    CsvFormat fmt = CSV_CURRENT;
    Pipeline *p = csv_import_dialect(&d, file, name ? name : autoname, &fmt);
    int rc = 1;
    if (p) {
        StrBuf b = {0};
        const char *base = strrchr(path, '/');
        sb_printf(&b, "# imported from %s (PyTorch pipelining schedule CSV) by pipec import-csv\n",
                  std_in ? "standard input" : base ? base + 1 : path);
        if (fmt == CSV_LEGACY) /* export-csv writes this dialect back by default */
            sb_puts(&b, CSV_LEGACY_MARK "\n");
        print_pipeline(&b, p);
        rc = write_output(out, &b);
        sb_free(&b);
        pipeline_free(p);
    }
    free(autoname);
    diag_free(&d);
    return rc;
}

/* pipec export-csv FILE.pipe [-o OUT.csv] [--legacy | --current] [--comms] [-I DIR] */
int cmd_export_csv(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"output", required_argument, NULL, 'o'},
        {"legacy", no_argument, NULL, 'L'},
        {"current", no_argument, NULL, 'C'},
        {"comms", no_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},
        DRIVER_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    const char *out = NULL;
    CsvFormat fmt = CSV_CURRENT;
    bool chosen = false, comms = false;
    DriverOpts o = {0};
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "o:h" DRIVER_SHORTOPTS, longopts, NULL)) != -1) {
        if (driver_common_opt(&o, opt, optarg))
            continue;
        switch (opt) {
        case 'o':
            out = optarg;
            break;
        case 'c':
            comms = true;
            break;
        case 'L':
        case 'C':
            fmt = opt == 'L' ? CSV_LEGACY : CSV_CURRENT;
            chosen = true;
            break;
        default:
            driver_opts_free(&o);
            return driver_usage_status("export-csv", opt == 'h');
        }
    }
    int st = driver_operands(argc, "export-csv", 1);
    if (st >= 0) {
        driver_opts_free(&o);
        return st;
    }
    Diag d = {0};
    Pipeline *p = driver_compile(&d, &o, argv[optind]);
    int rc = 1;
    if (p) {
        /* The dialect a file was imported in, unless an option chose one. */
        const char *mark = d.nfiles ? strstr(d.files[0].text, "\n" CSV_LEGACY_MARK) : NULL;
        if (!chosen && d.nfiles &&
            (mark || !strncmp(d.files[0].text, CSV_LEGACY_MARK, strlen(CSV_LEGACY_MARK))))
            fmt = CSV_LEGACY;
        StrBuf b = {0};
        if (comms)
            csv_export_comms(&d, p, fmt, &b);
        else
            csv_export(&d, p, fmt, &b);
        rc = d.nerr ? 1 : write_output(out, &b); /* a warning under -Werror writes nothing */
        sb_free(&b);
        pipeline_free(p);
    }
    diag_free(&d);
    driver_opts_free(&o);
    return rc;
}
