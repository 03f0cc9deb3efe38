# Helpers of the edge-host rules (edge.smk): the sites, their paths, their plans and job specs.
# A site's matrix is planned against its facts as measured there (checkpoint site_host_facts).
from dlvirt.core.formats import read_document  # noqa: E402
from dlvirt.system.hostinfo import load_capabilities  # noqa: E402
from dlvirt.plan.planner import Job  # noqa: E402
from dlvirt.core.scenario import Scenario  # noqa: E402

SITES = sorted(config["hosts"])
SITE_FACTS = "results/host-{site}.json"
SITE_RUN_FILE = "results/sites/{site}/runs/{tool}/{app}/{platform}/{cores}/{pinning}/{processor}/{replicate}.json"
SITE_ROUND_FILE = "results/sites/{site}/rounds/{replicate}.done"
SITE_LOADGEN_DIR = "results/sites/{site}/loadgen/{tool}/{app}/{platform}/{cores}/{pinning}/{processor}/{replicate}"

_SITE_PLANS = {}


def site_plan(site):
    """The site's jobs, planned against its capabilities as measured there (after the checkpoint)."""
    if site not in _SITE_PLANS:
        caps = None
        if config["host_check"]:
            facts = read_document(checkpoints.site_host_facts.get(site=site).output[0], "host facts")
            caps = load_capabilities(facts["capabilities"])
        try:
            plan = expand_plan(config, caps, site=site)
        except ConfigError as err:
            raise WorkflowError(f"invalid config: {err}") from None
        if workflow.is_main_process:
            for what, why in plan.left_out:
                print(f"dlvirt: left out on {site}: {what}: {why}", file=sys.stderr)
        _SITE_PLANS[site] = plan
    return _SITE_PLANS[site]


def site_run_files(tool, app):
    return sorted(
        SITE_RUN_FILE.format(site=site, **job.wildcards) for site in SITES for job in site_plan(site).jobs_of(tool, app)
    )


def site_job(wildcards):
    scenario = Scenario(wildcards.platform, int(wildcards.cores), wildcards.pinning, wildcards.processor)
    return Job(wildcards.tool, wildcards.app, scenario, wildcards.site, int(wildcards.replicate))


def site_benchmark_inputs(wildcards):
    """The inputs of a site job that is in the site's plan (known once its facts are)."""
    if site_job(wildcards) not in site_plan(wildcards.site).jobs:
        raise WorkflowError(
            "{tool} {app} {platform}/{cores}/{pinning}/{processor} is not in the plan of host {site} "
            "(see the 'left out on {site}' lines, hosts.{site}.matrix and study.replicates)".format(**wildcards)
        )
    # rounds interleave on each site as on this host (previous_round in common.smk)
    replicate = int(wildcards.replicate)
    earlier = [ancient(SITE_ROUND_FILE.format(site=wildcards.site, replicate=replicate - 1))] if replicate > 1 else []
    weights = weights_file(config, site_job(wildcards))
    return {
        "dataset": f"resources/datasets/{wildcards.app}",
        "weights": [weights] if weights else [],
        "host": SITE_FACTS.format(site=wildcards.site),
        "previous_round": earlier,
    }


def site_round_runs(wildcards):
    jobs = site_plan(wildcards.site).round(int(wildcards.replicate))
    return [SITE_RUN_FILE.format(site=wildcards.site, **job.wildcards) for job in jobs]


def site_job_spec(wildcards):
    return quoted_json(spec_param(benchmark_spec(config, site_job(wildcards), CN_IMAGE)))


def site_connection(wildcards):
    """How to reach the site (its matrix is not part of it: a new scenario reruns nothing else)."""
    return quoted_json({k: v for k, v in config["hosts"][wildcards.site].items() if k != "matrix"})
