# One job = one launch (replicate) of one tool x app x scenario with all its repetitions (the DAG
# of the paper's matrix stays small). The job provisions the platform, runs the harness inside,
# verifies what the harness observed against the scenario, tears the platform down, and only then
# writes its result. Round r + 1 waits for round r; within a round the plan's shuffled order leads.
rule benchmark:
    input:
        dataset="resources/datasets/{app}",
        weights=weights_input,
        host="results/host.json",
        images=platform_images,
        previous_round=previous_round,
    output:
        run=RUN_FILE,
        loadgen=directory(LOADGEN_DIR),
    log:
        "results/logs/benchmark/{tool}/{app}/{platform}/{cores}/{pinning}/{processor}/{replicate}.log",
    priority: job_priority
    conda:
        framework_env
    resources:
        bench=1,
        # minutes, for cluster executors: beyond the harness's own timeout, so teardown runs first
        runtime=int(config["harness"]["timeout_s"] // 60) + 30,
        # a cluster's node features: KVM for guests, the study's node kind (cluster.node_kind)
        constraint=node_constraint,
    params:
        spec=job_spec,
    # the spec on stdin, the shell replaced by the runner (exec): no command line holds the spec
    # (the mirror and engine URLs in it may carry credentials) while the job runs
    shell:
        "exec python -m dlvirt bench --spec - --output {output.run:q}"
        " --loadgen-dir {output.loadgen:q} <<< {params.spec} > {log:q} 2>&1"


# The end of a round of launches (replicate r of every scenario): what round r + 1 waits for.
rule round_done:
    input:
        round_runs,
    output:
        touch(ROUND_FILE),
    log:
        "results/logs/rounds/{replicate}.log",
    localrule: True
