# dlvirt: how the execution platform (BM, VM, MVM, CN, VMCN) changes the end-to-end inference time
# of deep-learning applications. Stages live in workflow/rules/; logic lives in src/dlvirt/.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


# Snakemake's own report (snakemake --report): this text on top, captions in workflow/report/.
report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/host.smk"
include: "workflow/rules/datasets.smk"
include: "workflow/rules/images.smk"
include: "workflow/rules/guests.smk"
include: "workflow/rules/benchmark.smk"
include: "workflow/rules/edge.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/report.smk"


onstart:
    # Snakemake keeps every job's shell command and params (a launch's spec, URL credentials included)
    # in .snakemake/metadata and prints them into .snakemake/log when a job fails: for root's eyes only.
    os.chmod(workflow.persistence.path, 0o700)
    # A study of zero launches stops here, in one line (a dry run, -n, never gets here: it shows the plan).
    if nothing := nothing_to_run(config, PLAN):
        print(f"dlvirt: {nothing}", file=sys.stderr)
        sys.exit(2)
    # A SIGINT to Snakemake alone (not Ctrl-C) would let running jobs run on: stop them (dlvirt.run.interrupt).
    stop_jobs_on_interrupt()
    # Start the engines the planned platforms need when none answers (dlvirt.system.engines), then remove
    # what a killed earlier run left (dlvirt-named, runner gone), never anything else.
    workflow_engines("up")
    # Job work directories only where every job runs here: a cluster node's job may outlive us.
    work_roots = ["--work-roots", "results", "resources"] if workflow.local_exec else []
    dlvirt_command("cleanup", "--settings", json.dumps(config["platforms"]), *work_roots)
    # What else keeps this host busy: launches sharing their CPUs with it run again (study.interference).
    dlvirt_command("background-load", "--settings", json.dumps(config["study"]["interference"]))


# Release the engines; one dlvirt started stops once no other workflow uses it.
onsuccess:
    workflow_engines("down")


onerror:
    workflow_engines("down")


rule all:
    default_target: True
    input:
        all_targets(),
