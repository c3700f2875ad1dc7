/* run.c - pr_run: the program on the backend this library was built with (pr_backend)
 * and the workload the options ask for, chosen here once (workload.h): the one place
 * above both the run core and the workloads. */
#include "workload.h"

const PrWorkload *pr_workload_for(const PrProgram *g, const PrOptions *o)
{
    if (o->workload == PR_SYNTHETIC)
        return &pr_workload_synthetic;
    if (o->workload != PR_MLP)
        return NULL;
    return g && g->model_arch != 0 ? &pr_workload_tf : &pr_workload_mlp;
}

int pr_run(const PrProgram *prog, const PrOptions *o, PrResult *res)
{
    return pr_run_core(&pr_backend, pr_workload_for(prog, o), prog, o, res);
}
