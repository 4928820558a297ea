/*
 * The drain protocol, model-checked (issue 29). Design of record: docs/architecture.md §4.1 (drain before
 * delete), §4.2 (evidence rules), §4.4 (deleting a NodeSet), §4.6 (the bridge) and §8 (leader election and the
 * write fence). Run it with hack/model.sh (`make model`); tests/model/test_drain_model.py runs it, and the
 * variants that each drop one rule, and checks the names below against the code.
 *
 * Three scenarios, chosen with -D: SCALE (default: a worker pod scaled in, out and in again, across a leader
 * change), DELETE (the NodeSet deleted, perhaps after a scale-in, with a job queued in its partition) and BRIDGE
 * (a bridge pod and its placeholder job). Each actor is a process; every step that stands for code names it in
 * a comment "impl: <module path>:<function>" (the test parses each module and finds each one).
 *
 * What the model keeps of the real objects, and the names it stands for (the test compares them with
 * slinky_common/names.py and slinky_common/slurmstate.py):
 *   name: ANNOTATION_DRAINED nodeset.slinky.slurm.net/drained                  (m_drained)
 *   name: ANNOTATION_SLURM_NODE_ABSENT nodeset.slinky.slurm.net/slurm-node-absent  (m_absent)
 *   name: LABEL_POD_PROTECT nodeset.slinky.slurm.net/pod-protect               (ev_node, with the conditions)
 *   name: CONDITION_SLURM_NODE_STATE_PREFIX SlurmNodeState                     (ev_node)
 *   name: ANNOTATION_POD_DEADLINE nodeset.slinky.slurm.net/pod-deadline        (ev_jobs)
 *   name: STATUS_DRAINING_PODS drainingPods                                    (intent)
 *   name: DRAIN_DELETE_NODE deleteSlurmNode                                    (intent_del)
 *   name: DRAIN_EPOCH epoch                                                    (ep, m_ep)
 *   name: ANNOTATION_DELETION_OBSERVED nodeset.slinky.slurm.net/deletion-observed  (rep*)
 *   name: ANNOTATION_FORCE_DELETE nodeset.slinky.slurm.net/force-delete        (force)
 *   name: DRAIN_REASON_PREFIX slurm-operator:                                  (DRAIN_OURS)
 *   name: LABEL_SLURM_JOB_ID scheduler.slinky.slurm.net/slurm-jobid            (b_label)
 *   name: ANNOTATION_JOB_RELEASED scheduler.slinky.slurm.net/job-released      (b_released)
 *   busy: ALLOCATED COMPLETING MIXED                                           (n_job: the node runs a job)
 *
 * Time is not modelled; what time decides is a nondeterministic choice with a bound (lease expiry, the grace
 * of pending jobs, when a job starts or ends). The bounds keep the state space small enough for a check in
 * well under a minute; hack/model.sh prints them with the states explored.
 *
 * Rules the variants drop, one at a time (-D<name>); each must give a counterexample:
 *   NO_BUSY_WINS   the hook lets a marked pod go whatever busy evidence it carries
 *   CONFIRM_ONCE   one not-found answer proves absence (slurm_sync/proof.py needs two passes)
 *   NO_FENCE       an old leader's writes still land after its fence closed
 * and the fixes the model led to (their regression tests are in the code's tests):
 *   NO_OWN_MARKS          slurm_sync diffs its pod patch against its watch cache alone, which may not show its
 *                         own last write yet: a mark it must remove (a drain lifted, a wrong answer corrected)
 *                         stays, as before the fix (slurm_sync/operator/loop.py:OperatorLoop._own_marks). Since
 *                         NO_EPOCH's fix, a stale mark no longer answers a new intent, and dropping this rule
 *                         alone finds no counterexample within the bounds; the code keeps it (a mark says what
 *                         slurm_sync last saw, and the absent mark carries no epoch).
 *   NO_EMPTY_PROOF        a deletion report that lets finalize finish is written on one listing, as before the
 *                         fix (slurm_sync/operator/deletion.py:execute)
 *   NO_EPOCH              the hook lets a condemned pod go on any drained mark, as before the fix: an intent
 *                         withdrawn and given again before slurm_sync carried out the withdrawal lets the pod go
 *                         on the first intent's mark while slurm_sync, acting on the withdrawal, lifts the drain
 *                         under it and a job starts. Each intent now carries an epoch (the NodeSet's
 *                         resourceVersion when issued, hooks/nodeset/hook.py:intent_epochs), the drained mark
 *                         echoes it (slurm_sync/operator/plan.py:drained_mark), and only the mark of the current
 *                         intent counts (hooks/nodeset/observe.py:ObservedPod.removable)
 *
 * What the model assumes, and so does not cover:
 *   - At most FAULTS wrong answers from Slurm in a run, each one of: the node listing and a GET of the node
 *     both lose node N for one pass; the node listing shows N idle and drained while a job runs; the job
 *     listing is empty; a GET of a job says not-found. Two consistent lies in one pass defeat any rule.
 *   - slurm_sync's watch may not show its own last write of the pod for one pass (a new term lists anew).
 *   - Metacontroller's view of the pod is current when a sync reads it; the answer is applied a step later.
 *     MC_STALE lets its view of the marks lag one write: safety holds with it too (a test checks), but the
 *     liveness claims do not (a view could then stay behind for ever). Its view of the NodeSet's status is
 *     current.
 *   - An administrator drains but never lifts a drain, and Slurm never returns a DOWN node to service on
 *     its own: either would make a drained mark stale until slurm_sync's next pass.
 */

#ifndef FAULTS
#define FAULTS 1
#endif
#ifndef FLIPS
#define FLIPS 3
#endif
#ifndef JOBS
#define JOBS 1
#endif
#ifndef TAKEOVERS
#define TAKEOVERS 1
#endif

#define DRAIN_NONE 0
#define DRAIN_OURS 1   /* a drain whose reason starts with slurm-operator: */
#define DRAIN_ADMIN 2  /* anyone else's drain: never lifted by slurm_sync */

#ifdef NO_FENCE
#define MAY_WRITE(r) true
#else
#define MAY_WRITE(r) fence[r]
#endif

/* ---- the Lease (§8): one replica leads; its fence is open while it may write ------------------------- */
bit holder = 0;
bool fence[2];
bool fresh_term[2];        /* a term starts: the replica's Service is built anew, nothing carried over */
byte takeovers = TAKEOVERS;

/* One leader's writes only: a write lands only while the Lease names its sender (ANY_WRITER leaves the
   check out, to see what a late write does). */
#ifdef ANY_WRITER
#define ONE_WRITER(r) skip
#else
#define ONE_WRITER(r) assert(holder == r)
#endif

/* impl: slurm_sync/leader.py:LeaseElector._held_by_another */
/* impl: slurm_sync/leader.py:Fence.close */
/* impl: slurm_sync/replica.py:Replica._term */
active proctype Lease() {
    fence[0] = true;
end_lease:
    do
    /* The leader cannot renew (paused, partitioned): its fence closes renew-deadline after its last renew. */
    :: atomic { takeovers > 0 && fence[holder] -> fence[holder] = false; takeovers-- }
    /* The standby takes over only once the record it saw stayed unchanged for the lease duration, which is
       after the old fence closed (lease duration > renew deadline). */
    :: atomic { !fence[holder] -> holder = 1 - holder; fence[holder] = true;
                fresh_term[holder] = true }
    od
}

#ifndef BRIDGE
/* ============================ NODESET scenarios: SCALE (default) and DELETE ============================= */
/* A NodeSet with one worker pod P whose slurmd is Slurm node N. SCALE: the user scales P in and out (FLIPS
   times); DELETE: the user deletes the NodeSet, perhaps after a scale-in, while a job is pending in its
   partition. */

#ifdef DELETE
#define INIT_PEND true
#else
#define INIT_PEND false
#endif

/* ---- Slurm ---- */
bool n_rec = true;         /* N's node record exists */
byte n_drain = DRAIN_NONE;
bool n_down;               /* DOWN: set by the preStop of P's termination */
bool n_job;                /* a job runs on N: one of the busy states */
byte job_starts = JOBS;    /* jobs Slurm may still start on N besides the pending one */
bool pend = INIT_PEND;     /* a job pending in the NodeSet's partition */
byte faults = FAULTS;

/* ---- Kubernetes: P, and what slurm_sync wrote on it ---- */
bool pod = true;
bool pod_term;             /* deletionTimestamp set; the kubelet runs the preStop */
bool m_drained, m_absent, ev_node, ev_jobs;
bool o_drained, o_absent;  /* the marks before the latest write: what its writer's watch may still show */
bit pod_writer;            /* the replica that wrote P last (a new term lists anew: only one's own write lags) */
bool lagging;              /* its watch has not shown that write yet: for one more pass at most */

/* ---- Kubernetes: the NodeSet ---- */
bool want = true;          /* the spec keeps P (false: scaled in, or a rollout replaces it) */
bool rereg;                /* P's replacement registers differently: its record must go first */
byte flips = FLIPS;
bool deleting;             /* deletionTimestamp: Metacontroller calls finalize */
bool force;                /* the administrator's force-delete annotation */
bool intent, intent_del;   /* status.drainingPods as the last applied sync published it */
bool rep, rep_pending, rep_nodes;  /* slurm_sync's deletion report: present, pending jobs, records left */
bool grace_over;           /* the report's cancelAt has passed */
bool finalized;            /* finalize finished: the NodeSet's slurm.conf lines go */
byte ep;                   /* the published intent's epoch; each intent issued anew gets a new one (1, 2, ...) */
byte m_ep, o_ep;           /* the epoch the drained mark carries (0: none), and before the latest write */

/* ---- the NodeSet hook: a pure function of what Metacontroller observed ---- */
/* impl: hooks/nodeset/hook.py:sync */
/* impl: hooks/nodeset/hook.py:finalize */
/* impl: hooks/nodeset/plan.py:plan_finalize */
/* impl: hooks/nodeset/deletion.py:release_mode */
/* impl: hooks/nodeset/deletion.py:kept_pods */
/* impl: hooks/nodeset/deletion.py:blockers */
/* impl: hooks/nodeset/hook.py:_finalize_response */
/* impl: hooks/nodeset/observe.py:still_wanted */
/* impl: hooks/nodeset/observe.py:ObservedPod.removable */
/* impl: hooks/nodeset/observe.py:ObservedPod.busy_evidence */
/* impl: hooks/nodeset/hook.py:intent_epochs */
/* The drained mark counts for the intent the answer publishes: the one published, if it stands, with its epoch;
   an intent issued anew has an epoch no mark carries yet. */
#ifdef NO_EPOCH
#define FOR_INTENT(d, e) (d)
#else
#define FOR_INTENT(d, e) ((d) && intent && (e) == ep)
#endif
#ifdef NO_BUSY_WINS
#define REMOVABLE(d, a) ((d) || (a))
#else
#define REMOVABLE(d, a) (((d) || (a)) && !ev_node && !ev_jobs)
#endif

/* ---- Metacontroller: reads its caches and calls the hook; applies the answer one step later ---- */
/* A failed call or write applies nothing and is retried: the same as a sync that has not happened yet. */
active proctype Metacontroller() {
    bool d, a, rel, cond, cond_del, del_p, done;
end_mc:
    do
    :: atomic {
        !finalized ->
        d = FOR_INTENT(m_drained, m_ep); a = m_absent;
#ifdef MC_STALE
        if :: skip :: d = FOR_INTENT(o_drained, o_ep); a = o_absent fi;
#endif
        rel = deleting && force;   /* force-delete: every pod released, the report not waited for */
        /* a terminating pod is already going and gets no intent (Plan.condemn) */
        cond = pod && !pod_term && !rel && (deleting || !want);
        cond_del = cond && !deleting && rereg;
        del_p = pod && !pod_term && (rel || (cond && REMOVABLE(d, a) && (a || !cond_del)));
        /* finalize finishes when nothing is held and (drain mode) the report lists no job and no record */
        done = deleting && (rel || ((!pod || del_p) && rep && !rep_pending && !rep_nodes));
        d = false; a = false
       }
       atomic {
        if :: cond && !intent -> ep++ :: else -> skip fi;   /* a new intent, a new epoch */
        intent = cond; intent_del = cond_del;
        if
        :: del_p && pod && !pod_term ->
            /* Metacontroller deletes the child the answer left out: outside the release case (force-delete),
               the pod's node must run no job */
            assert(rel || !n_job);
            pod_term = true
        :: else -> skip
        fi;
        if
        :: done ->
            /* the NodeSet goes, and its partition's lines with it: every job of the partition ends (§4.4) */
            assert(rel || (!pend && !n_job));
            finalized = true; pend = false
        :: else -> skip
        fi;
        rel = false; cond = false; cond_del = false; del_p = false; done = false
       }
    od
}

/* ---- the kubelet: a terminating pod's preStop sets N DOWN (a job there ends); then the pod is gone ---- */
/* impl: hooks/nodeset/pods.py:_slurmd_container */
active proctype Kubelet() {
end_kubelet:
    do
    :: atomic { pod_term -> n_down = n_rec; n_job = false; pod = false; pod_term = false }
    od
}

/* ---- Slurm: a job starts at any moment on an undrained node, and ends ---- */
active proctype Slurm() {
end_slurm:
    do
    :: atomic { !finalized && !n_job && n_rec && !n_down && n_drain == DRAIN_NONE && (pend || job_starts > 0) ->
                n_job = true;
                if
                :: pend -> pend = false
                :: job_starts > 0 -> job_starts--
                fi }
    :: atomic { n_job -> n_job = false }
    od
}

/* ---- the user ---- */
#ifdef DELETE
active proctype User() {
    if
    :: atomic { want = false; if :: rereg = true :: rereg = false fi }   /* a scale-in first */
    :: skip
    fi;
    deleting = true
}

/* the grace of pending jobs (§4.4 step 3) passes once the report gave them a cancelAt */
active proctype Clock() {
end_clock:
    atomic { rep_pending -> grace_over = true }
}
#else
active proctype User() {
end_user:
    do
    :: atomic { flips > 0 && want -> want = false; flips--; if :: rereg = true :: rereg = false fi }
    :: atomic { flips > 0 && !want -> want = true; flips--; rereg = false }
    od
}
#endif

/* ---- an administrator: drains N with a reason of their own (never lifted); force-deletes ---- */
active proctype Admin() {
    if
    :: atomic { n_rec && n_drain != DRAIN_ADMIN -> n_drain = DRAIN_ADMIN }
    :: skip
    fi;
#ifdef DELETE
    if
    :: atomic { deleting && !finalized -> force = true }
    :: skip
    fi
#endif
}

/* ---- slurm_sync's operator loop: a pass reads both sides and plans; its writes land one by one ---- */
/* impl: slurm_sync/operator/loop.py:OperatorLoop._run_pass */
/* impl: slurm_sync/operator/loop.py:OperatorLoop.read_slurm */
/* impl: slurm_sync/operator/loop.py:OperatorLoop._prove_absence */
/* impl: slurm_sync/operator/loop.py:OperatorLoop._apply_pod */
/* impl: slurm_sync/operator/loop.py:OperatorLoop._slurm_updates */
/* impl: slurm_sync/operator/plan.py:plan_pod */
/* impl: slurm_sync/operator/plan.py:drain_action */
/* impl: slurm_sync/operator/plan.py:drained_mark */
/* impl: slurm_sync/operator/plan.py:deadline_annotation */
/* impl: slurm_sync/operator/plan.py:metadata_patch */
/* impl: slurm_sync/proof.py:AbsenceProof.not_found */
/* impl: slurm_sync/operator/records.py:record_deletes */
/* impl: slurm_sync/operator/records.py:confirmed */
/* impl: slurm_sync/operator/deletion.py:execute */
/* impl: slurm_sync/operator/deletion.py:still_pending */
/* impl: slurm_sync/operator/deletion.py:plan_deletion */
/* impl: slurm_sync/leader.py:fence_writes */
/* A patch key: left as it is, or set to false or true (metadata_patch sends only what differs from the view). */
#define KEEP 0
#define SET0 1
#define SET1 2
#define PATCHED(k, cur) ((k) == KEEP -> (cur) : (k) == SET1)
#define KEY(view, want) ((view) == (want) -> KEEP : ((want) -> SET1 : SET0))
#define S_NONE 0
#define S_DRAIN 1
#define S_UNDRAIN 2
proctype Replica(bit r) {
    bool nf_node, nf_empty;   /* the term's memory: a first not-found of N, a first "nothing left" */
    bool my_d, my_a;          /* ... and the marks it last wrote on P (OperatorLoop._own_marks) */
    byte my_ep, v_ep, i_ep;   /* the epoch of its last drained mark, of the one it sees, of the intent it read */
    bool listed, lost, l_busy, l_rel, l_ours, l_admin, j_on, j_pend, v_d, v_a, v_en, v_ej, intent_now;
    bool wd, wa, wen, wej, pending, left, lift, nodes_ok;
    byte k_d, k_a, k_en, k_ej, w_slurm;   /* what the pass writes ... */
    bool w_delrec, w_cancel, w_rep, w_rp, w_rn;
end_replica:
    do
    :: atomic {
        holder == r && fence[r] && !finalized ->
        if
        :: fresh_term[r] -> nf_node = false; nf_empty = false; my_d = false; my_a = false; my_ep = 0;
                            fresh_term[r] = false
        :: else -> skip
        fi;
        /* Kubernetes through slurm_sync's watch cache: the marks may still lack its own latest write */
        intent_now = intent && !pod_term;
        i_ep = (intent_now -> ep : 0);   /* drained_mark: the intent's epoch, none without a NodeSet intent */
        v_d = m_drained; v_ep = m_ep; v_a = m_absent; v_en = ev_node; v_ej = ev_jobs;
        if :: pod_writer == r && lagging -> v_d = o_drained; v_ep = o_ep; v_a = o_absent :: skip fi;
        lagging = lagging && pod_writer != r;
#ifndef NO_OWN_MARKS
        /* the fix: a mark this term wrote counts as seen until the cache shows it, so its removal is sent */
        if :: my_d -> v_d = true; v_ep = my_ep :: else -> skip fi;
        v_a = v_a || my_a;
#endif
        /* Slurm's node listing and job listing, one of them wrong while faults are left */
        listed = n_rec; l_busy = n_job; l_rel = !n_job && (n_drain != DRAIN_NONE || n_down);
        l_ours = n_drain == DRAIN_OURS; l_admin = n_drain == DRAIN_ADMIN;
        j_on = n_job; j_pend = pend; lost = false;
        if
        :: faults > 0 && n_rec -> faults--; listed = false; lost = true           /* N lost: listing and GET */
        :: faults > 0 && n_job -> faults--; l_busy = false; l_rel = true          /* N shown idle and drained */
        :: faults > 0 && (n_job || pend) -> faults--; j_on = false; j_pend = false  /* an empty job listing */
        :: skip
        fi;
        nodes_ok = true;
        if
        :: pod && !listed ->
            /* _prove_absence: a job listed on N wins; else Slurm is asked about N by name */
            if
            :: j_on -> nf_node = false; nodes_ok = false   /* contradiction: the node listing counts as unread */
            :: !j_on && n_rec && !lost -> nf_node = false   /* Slurm has N */
            :: else ->
#ifdef CONFIRM_ONCE
                nf_node = true;
#endif
                if
                :: nf_node ->   /* not-found held on an earlier pass: absent, and every other word of N goes */
                    k_d = KEY(v_d, false); k_a = KEY(v_a, true); k_en = KEY(v_en, false); k_ej = KEY(v_ej, false)
                :: else -> nf_node = true
                fi
            fi
        :: pod && listed ->
            nf_node = false;
            /* drain_action: never for a terminating pod, never over someone else's reason */
            if
            :: !pod_term && !l_admin && intent_now && !l_ours -> w_slurm = S_DRAIN
            :: !pod_term && !l_admin && !intent_now && l_ours -> w_slurm = S_UNDRAIN; lift = true
            :: else -> skip
            fi;
            /* deadline_annotation: from the job listing; left as it is for a busy node the listing lacks */
            wej = v_ej;
            if :: j_on -> wej = true :: !j_on && !l_busy -> wej = false :: else -> skip fi;
            k_d = KEY(v_d, l_rel && !lift); k_a = KEY(v_a, false); k_en = KEY(v_en, l_busy); k_ej = KEY(v_ej, wej);
            if :: k_d == KEEP && v_d && v_ep != i_ep -> k_d = SET1 :: else -> skip fi;   /* another intent's mark */
            /* records: a flagged pod's record goes once released, no job listed, no busy evidence on the pod,
               and a GET of N agrees */
            w_delrec = !deleting && intent_now && intent_del && l_rel && !j_on && !v_en && !v_ej &&
                       !n_job && (n_drain != DRAIN_NONE || n_down)
        :: else -> skip
        fi;
        /* deletion (§4.4): report pending jobs and records left, cancel pending jobs past the grace, delete
           the records once no pod is listed (and the apiserver says NotFound for it) */
        if
        :: deleting && nodes_ok ->
            pending = j_pend || (rep_pending && pend);   /* a reported job leaves only on Slurm's word by id */
            left = listed;
            w_cancel = pending && grace_over && pend;
            w_delrec = w_delrec || (!pod && listed && !l_busy);
            w_rp = pending; w_rn = left;
            if
            :: !pending && !left && !(rep && !rep_pending && !rep_nodes) ->
#ifdef NO_EMPTY_PROOF
                w_rep = true
#else
                /* the fix: "nothing left" is an absence too; a later pass must say it again */
                if :: nf_empty -> w_rep = true :: else -> nf_empty = true fi
#endif
            :: pending || left -> nf_empty = false; w_rep = !rep || rep_pending != w_rp || rep_nodes != w_rn
            :: else -> skip
            fi
        :: else -> skip
        fi;
        listed = false; lost = false; l_busy = false; l_rel = false; l_ours = false; l_admin = false;
        j_on = false; j_pend = false; v_d = false; v_ep = 0; v_a = false; v_en = false; v_ej = false; intent_now = false;
        wej = false; pending = false; left = false; nodes_ok = false
       }
       /* the writes in the loop's order: the pod patch, then Slurm's update (a lift only after the patch landed) */
       if
       :: k_d != KEEP || k_a != KEEP || k_en != KEEP || k_ej != KEEP ->
           atomic {
            if
            :: MAY_WRITE(r) -> ONE_WRITER(r);
                o_drained = m_drained; o_ep = m_ep; o_absent = m_absent; pod_writer = r; lagging = true;
                m_drained = PATCHED(k_d, m_drained); m_absent = PATCHED(k_a, m_absent);
                if :: k_d == SET1 -> m_ep = i_ep :: k_d == SET0 -> m_ep = 0 :: else -> skip fi;
                ev_node = PATCHED(k_en, ev_node); ev_jobs = PATCHED(k_ej, ev_jobs);
                my_d = m_drained; my_ep = m_ep; my_a = m_absent
            :: else -> lift = false; w_slurm = S_NONE   /* refused: no lift follows */
            fi;
            k_d = KEEP; k_a = KEEP; k_en = KEEP; k_ej = KEEP; i_ep = 0
           }
       :: else -> skip
       fi;
       if
       :: w_slurm != S_NONE ->
           atomic {
            if
            :: MAY_WRITE(r) -> ONE_WRITER(r);
                n_drain = (w_slurm == S_DRAIN -> DRAIN_OURS : DRAIN_NONE)   /* UNDRAIN lifts any drain */
            :: else -> skip
            fi;
            w_slurm = S_NONE; lift = false
           }
       :: else -> skip
       fi;
       if
       :: w_delrec || w_cancel ->
           atomic {
            if
            :: MAY_WRITE(r) -> ONE_WRITER(r);
                if :: w_cancel -> pend = false :: else -> skip fi;
                if   /* Slurm refuses a busy node; the record goes with its state */
                :: w_delrec && !n_job -> n_rec = false; n_down = false; n_drain = DRAIN_NONE
                :: else -> skip
                fi
            :: else -> skip
            fi;
            w_delrec = false; w_cancel = false
           }
       :: else -> skip
       fi;
       if
       :: w_rep ->
           atomic {
            if
            :: MAY_WRITE(r) -> ONE_WRITER(r); rep = true; rep_pending = w_rp; rep_nodes = w_rn
            :: else -> skip
            fi;
            w_rep = false; w_rp = false; w_rn = false
           }
       :: else -> skip
       fi;
    od
}

init {
    atomic { run Replica(0); run Replica(1) }
}

/* ---- liveness, under weak fairness (pan -a -f) ---- */
#ifdef DELETE
/* A NodeSet deletion eventually finishes once its jobs end. */
ltl deletes { [] (deleting -> <> finalized) }
#else
/* A condemned pod whose node becomes idle is eventually deleted (or no longer condemned). */
ltl drains { [] ((pod && !want) -> <> (!pod || want)) }
#endif

#else
/* ======================================= BRIDGE scenario =============================================== */
/* A bridge pod B whose placeholder job is J (§4.6). */
#define J_NONE 0
#define J_PENDING 1
#define J_RUNNING 2
#define J_OVER 3

byte job = J_NONE;
byte faults = FAULTS;
bool b_pod = true, b_bound, b_ended, b_del, b_label, b_released;

/* Slurm starts the pending job on a node, and the job ends (time limit, failure) */
active proctype Slurm() {
end_slurm:
    do
    :: atomic { job == J_PENDING -> job = J_RUNNING }
    :: atomic { job == J_RUNNING -> job = J_OVER }
    od
}

/* The kubelet: a bound pod's containers finish. The user deletes the pod. Metacontroller's pod finalize
   keeps the scheduler finalizer until slurm_sync released the job (hooks/bridge/pod.py:finalize). */
/* impl: hooks/bridge/pod.py:finalize */
active proctype Kube() {
end_kube:
    do
    :: atomic { b_pod && b_bound && !b_ended -> b_ended = true }
    :: atomic { b_pod && !b_del -> b_del = true }
    :: atomic { b_pod && b_del && (!b_label || b_released) -> b_pod = false }
    od
}

/* ---- slurm_sync's bridge loop ---- */
/* impl: slurm_sync/bridge/loop.py:BridgeLoop.run_pass */
/* impl: slurm_sync/bridge/loop.py:BridgeLoop.read_jobs */
/* impl: slurm_sync/bridge/loop.py:BridgeLoop._pods_gone */
/* impl: slurm_sync/bridge/loop.py:BridgeLoop._cancel */
/* impl: slurm_sync/bridge/plan.py:plan_pods */
/* impl: slurm_sync/bridge/plan.py:ended */
/* impl: slurm_sync/bridge/plan.py:orphans */
/* impl: slurm_sync/proof.py:AbsenceProof.not_found */
proctype Replica(bit r) {
    bool nf_job;
    bool v_pod, v_label, v_bound, v_live, known, gone, running, alive;
    bool w_submit, w_bind, w_delete, w_cancel, w_release;
end_replica:
    do
    :: atomic {
        holder == r && fence[r] ->
        if :: fresh_term[r] -> nf_job = false; fresh_term[r] = false :: else -> skip fi;
        w_submit = false; w_bind = false; w_delete = false; w_cancel = false; w_release = false;
        v_pod = b_pod; v_label = b_label; v_bound = b_bound; v_live = !b_ended && !b_del;
        if
        :: faults > 0 && b_pod -> faults--; v_pod = false    /* the watch cache lacks B */
        :: true -> skip
        fi;
        if
        :: v_pod && v_label ->
            /* read_jobs: GET job/<id>; not-found counts only once it held on an earlier pass */
            known = true; gone = false;
            if
            :: faults > 0 && job != J_OVER -> faults--;
#ifdef CONFIRM_ONCE
                nf_job = true;
#endif
                if :: nf_job -> gone = true :: else -> nf_job = true; known = false fi
            :: true -> nf_job = false
            fi;
            running = known && !gone && job == J_RUNNING;
            alive = known && !gone && job != J_OVER;
            if
            :: known && !v_live ->
                w_cancel = alive; w_release = !b_released             /* every pod of the job ended */
            :: known && v_live && v_bound && !running -> w_delete = true   /* bound, its job not running */
            :: known && v_live && !v_bound && running -> w_bind = true
            :: else -> skip
            fi
        :: v_pod && !v_label && v_live && !v_bound -> w_submit = true
        :: !v_pod && job != J_NONE && job != J_OVER && !b_pod ->
            w_cancel = true   /* orphans: its pod is not listed, and the apiserver says NotFound (_pods_gone) */
        :: else -> skip
        fi
       }
       if
       :: w_submit -> atomic { if :: MAY_WRITE(r) -> ONE_WRITER(r); job = J_PENDING; b_label = true :: else -> skip fi }
       :: else -> skip
       fi;
       if
       :: w_cancel -> atomic { if :: MAY_WRITE(r) -> ONE_WRITER(r);
                                    /* a running job is cancelled only when its pod ended */
                                    assert(!(job == J_RUNNING && b_pod && !b_ended && !b_del));
                                    if :: job != J_OVER -> job = J_OVER :: else -> skip fi
                                  :: else -> w_release = false fi }
       :: else -> skip
       fi;
       if
       :: w_release -> atomic { if :: MAY_WRITE(r) -> ONE_WRITER(r); b_released = true :: else -> skip fi }
       :: else -> skip
       fi;
       if
       :: w_delete -> atomic { if :: MAY_WRITE(r) -> ONE_WRITER(r);
                                    /* a bound pod is deleted only when its job no longer runs */
                                    assert(job != J_RUNNING);
                                    b_del = true
                                  :: else -> skip fi }
       :: else -> skip
       fi;
       if
       :: w_bind -> atomic { if :: MAY_WRITE(r) && b_pod -> ONE_WRITER(r); b_bound = true :: else -> skip fi }
       :: else -> skip
       fi;
       d_step {
        v_pod = false; v_label = false; v_bound = false; v_live = false; known = false; gone = false;
        running = false; alive = false; w_submit = false; w_bind = false; w_delete = false; w_cancel = false;
        w_release = false
       }
    od
}

init {
    atomic { run Replica(0); run Replica(1) }
}

/* A pod that ends eventually lets go of its job: the job is over and the pod is gone. */
ltl releases { [] (b_del -> <> (!b_pod && job != J_RUNNING)) }
#endif
