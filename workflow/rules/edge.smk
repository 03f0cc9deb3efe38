# Edge hosts (config hosts.<site>): the study's apps on another machine, over SSH. The remote runs
# the same runner as a local benchmark job, on its own engines; code and inputs are copied once
# (content-addressed) and results come back under results/sites/<site>/ (local paths unchanged).


include: "sites.smk"


# These jobs drive the remote machine from this host's SSH client: never submit them to a cluster.
localrules:
    site_host_facts,
    site_benchmark,


wildcard_constraints:
    site="|".join(SITES) or "(?!)",


checkpoint site_host_facts:
    output:
        SITE_FACTS,
    log:
        "results/logs/sites/{site}/host_facts.log",
    conda:
        "../../envs/analysis.yaml"
    params:
        ssh=site_connection,
    shell:
        "python -m dlvirt site-facts --site {wildcards.site:q} --ssh {params.ssh} --output {output:q} > {log:q} 2>&1"


rule site_benchmark:
    input:
        unpack(site_benchmark_inputs),
    output:
        run=SITE_RUN_FILE,
        loadgen=directory(SITE_LOADGEN_DIR),
    log:
        "results/logs/sites/{site}/benchmark/{tool}/{app}/{platform}/{cores}/{pinning}/{processor}/{replicate}.log",
    conda:
        "../../envs/analysis.yaml"
    resources:
        bench=1,
    params:
        spec=site_job_spec,
        ssh=site_connection,
    # the spec on stdin (see rule benchmark)
    shell:
        "exec python -m dlvirt site-bench --site {wildcards.site:q} --ssh {params.ssh} --spec -"
        " --output {output.run:q} --loadgen-dir {output.loadgen:q} <<< {params.spec} > {log:q} 2>&1"


rule site_round_done:
    input:
        site_round_runs,
    output:
        touch(SITE_ROUND_FILE),
    log:
        "results/logs/sites/{site}/rounds/{replicate}.log",
    localrule: True
