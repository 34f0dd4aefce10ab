"""Specs as the code at 9fda53f (before JobSpec) stored them, and their spec_hash.

Made with that code's own paths (``runs.plan``, ``build``, ``finish``, a session's pod put in,
a git connection's mount resolved as ``GitService.resolve_mounts`` does, ``sealed_env.sealed_spec`` (now ``sealed_doc``)
with ``Sealer(b"k" * 32)`` for org ``org_1``): the stored JSON column's text, byte for byte.
"""

STORED: dict[str, tuple[str, str]] = {
    "minimal": (
        (
            '{"command":["sh","-c","i=0\\nwhile [ \\"$i\\" -lt \\"${RUNPLANE_CONFIG_REPEAT:-1}\\" '
            ']; do\\n  echo \\"${RUNPLANE_CONFIG_MESSAGE:-hello from runplane}\\"\\n  i=$((i + 1)'
            ')\\ndone\\necho \\"host $(uname -n), kernel $(uname -r), $(nproc 2>/dev/null || ech'
            'o \'?\') cores, in $(pwd)\\"\\n"],"config":{"message":"hello from runplane","repeat"'
            ':1},"env":{},"image":"debian:bookworm-slim","inputs":[],"isolation":"none","limi'
            'ts":{"cpu_cores":null,"egress_allow":[],"gpu_count":null,"no_internet":false,"pi'
            'ds":null,"ram_gb":null,"timeout_sec":null},"mode":"run","outputs":[],"requires":'
            '{"arch":[],"capabilities":[],"cpu":{"min_cores":1},"disk":{"min_gb":0},"gpu":{"c'
            'uda_min":"","min_vram_gb":0,"required":false,"vendor":""},"ram":{"min_gb":0},"tr'
            'ust":{"min_tier":"community"}},"seed":346280078,"stack":"shell","weights":{},"we'
            'ights_preset":null,"workspace":null}'
        ),
        "55dfd405dcd8047e80d1e4612f0ea0c99faf0e9fad15b298ae4cdb3acbb769e7",
    ),
    "full": (
        (
            '{"command":["python","-c","print(1)"],"config":{"entrypoint":"main.py","install_'
            'requirements":true,"unbuffered":true},"env":{"A":"1","DB":"${secrets.DB_URL}","H'
            'F_TOKEN":"${sealed}","RUNPLANE_SETUP":"pip install x"},"env_sealed":{"HF_TOKEN":'
            '"v1.riUOmiYBGrktBvy9CSMh9aoYfSifKAdRVSyivCiW6B5G3rs2B5ws9-G0"},"image":"python:3'
            '.11-slim","inputs":[{"connection_id":null,"mode":"ro","path":"/work/data","ref":'
            '"https://example.com/d.tar.gz","type":"archive"},{"connection_id":null,"mode":"r'
            'w","path":"scratch","ref":"","type":"dir"}],"isolation":"gvisor","limits":{"cpu_'
            'cores":4,"egress_allow":["pypi.org"],"gpu_count":1,"no_internet":true,"pids":512'
            ',"ram_gb":32,"timeout_sec":3600},"mode":"run","outputs":[{"artifact":"model","gl'
            'ob":"out/*.pt","optional":true}],"requires":{"arch":["aarch64","x86_64"],"capabi'
            'lities":["docker","sandbox"],"cpu":{"min_cores":4},"disk":{"min_gb":20},"gpu":{"'
            'cuda_min":"12.1","min_vram_gb":16,"required":true,"vendor":"nvidia"},"ram":{"min'
            '_gb":8},"trust":{"min_tier":"partner"}},"retry":{"backoff_factor":1.5,"backoff_s'
            'ec":5,"limit":2,"on":["failed","timeout"]},"seed":42,"stack":"python","weights":'
            '{"cost":0.5,"gpu":2.0},"weights_preset":"training","workspace":{"connection_id":'
            'null,"mode":"rw","path":"/work/main.py","ref":"print(\'hé\')","type":"inline"}}'
        ),
        "6c9ceef7d9c61a5398ba1eaa3b9bc00ac262521cd6080e9d6a62ab526967e760",
    ),
    "clamped": (
        (
            '{"command":["true"],"config":{"message":"hello from runplane","repeat":1},"env":'
            '{},"image":"debian:bookworm-slim","inputs":[],"isolation":"none","limits":{"cpu_'
            'cores":128,"egress_allow":[],"gpu_count":null,"no_internet":false,"pids":null,"r'
            'am_gb":null,"timeout_sec":null},"mode":"run","outputs":[],"requires":{"arch":[],'
            '"capabilities":[],"cpu":{"min_cores":1},"disk":{"min_gb":0},"gpu":{"cuda_min":""'
            ',"min_vram_gb":0,"required":false,"vendor":""},"ram":{"min_gb":0},"trust":{"min_'
            'tier":"community"}},"seed":1612278359,"stack":"shell","weights":{},"weights_pres'
            'et":null,"workspace":null}'
        ),
        "bb801f9211b0a309af397acca71931fe34feda6b795f1cfd371a030d38184cae",
    ),
    "stage": (
        (
            '{"command":["python3","-c","import csv, json, math, os, random, time\\n\\ndef cfg('
            'key, default):\\n    return os.environ.get(\\"RUNPLANE_CONFIG_\\" + key) or default'
            '\\n\\nepisodes = int(cfg(\\"EPISODES\\", \\"10\\"))\\nmax_steps = int(cfg(\\"MAX_STEPS\\"'
            ', \\"200\\"))\\npolicy = cfg(\\"POLICY\\", \\"pd\\")\\nepsilon = float(cfg(\\"EPSILON\\", '
            '\\"0.1\\"))\\nrealtime = cfg(\\"REALTIME\\", \\"false\\").lower() == \\"true\\"\\nseed = i'
            'nt(os.environ.get(\\"RUNPLANE_SEED\\") or 0)\\nrng = random.Random(seed)\\n# Classic'
            " cart-pole (Barto, Sutton & Anderson 1983), Euler steps of 20 ms.\\nG, M_CART, M_"
            "POLE, HALF_LEN, FORCE, DT = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02\\nTOTAL = M_CART + M_P"
            'OLE\\n\\ndef act(x, x_dot, th, th_dot):\\n    if policy == \\"random\\" or rng.random'
            "() < epsilon:\\n        return rng.randrange(2)\\n    return int(th + 0.5 * th_dot"
            " + 0.01 * x + 0.1 * x_dot > 0)\\n\\ndef step(x, x_dot, th, th_dot, force):\\n    co"
            "s, sin = math.cos(th), math.sin(th)\\n    tmp = (force + M_POLE * HALF_LEN * th_d"
            "ot**2 * sin) / TOTAL\\n    th_acc = (G * sin - cos * tmp) / (HALF_LEN * (4 / 3 - "
            "M_POLE * cos**2 / TOTAL))\\n    x_acc = tmp - M_POLE * HALF_LEN * th_acc * cos / "
            "TOTAL\\n    return x + DT * x_dot, x_dot + DT * x_acc, th + DT * th_dot, th_dot +"
            " DT * th_acc\\n\\ndef fallen(x, th):\\n    return abs(x) > 2.4 or abs(th) > 0.2095\\"
            'n\\nclass Teleop:\\n    \\"\\"\\"New lines of <streams dir>/control.teleop: {\\"seq\\",'
            ' \\"ts\\", \\"frame\\": {\\"push\\": p}}.\\"\\"\\"\\n    def __init__(self, path):\\n      '
            '  self.path, self.pos, self.buf = path, 0, b\\"\\"\\n    def pushes(self):\\n       '
            ' try:\\n            with open(self.path, \\"rb\\") as f:\\n                f.seek(se'
            "lf.pos)\\n                data = f.read()\\n        except FileNotFoundError:\\n   "
            "         return 0.0\\n        self.pos += len(data)\\n        self.buf += data\\n  "
            '      total = 0.0\\n        while b\\"\\\\n\\" in self.buf:\\n            line, self.b'
            'uf = self.buf.split(b\\"\\\\n\\", 1)\\n            try:\\n                push = json.'
            'loads(line)[\\"frame\\"][\\"push\\"]\\n            except (ValueError, KeyError, Type'
            "Error):\\n                continue\\n            if isinstance(push, (int, float))"
            " and not isinstance(push, bool) and math.isfinite(push):\\n                total "
            "+= max(-1.0, min(1.0, push))\\n        return max(-1.0, min(1.0, total))\\n\\ndef r"
            'un_realtime(out):\\n    \\"\\"\\"One run of max_steps steps at 50 Hz; a fall starts '
            'the next episode.\\"\\"\\"\\n    streams = os.environ.get(\\"RUNPLANE_STREAMS_DIR\\") '
            'or \\"streams\\"\\n    os.makedirs(streams, exist_ok=True)\\n    telemetry = open(os'
            '.path.join(streams, \\"telemetry\\"), \\"a\\", buffering=1)\\n    control = Teleop(os'
            '.path.join(streams, \\"control.teleop\\"))\\n    x, x_dot, th, th_dot = (rng.unifor'
            "m(-0.05, 0.05) for _ in range(4))\\n    ep, steps, push = 1, 0, 0.0\\n    tick = t"
            "ime.monotonic()\\n    for n in range(1, max_steps + 1):\\n        push = control.p"
            "ushes()\\n        action = act(x, x_dot, th, th_dot)\\n        force = (FORCE if a"
            "ction else -FORCE) + push * FORCE\\n        x, x_dot, th, th_dot = step(x, x_dot,"
            ' th, th_dot, force)\\n        steps += 1\\n        out.writerow([ep, steps, f\\"{x:'
            '.6f}\\", f\\"{x_dot:.6f}\\", f\\"{th:.6f}\\", f\\"{th_dot:.6f}\\", action])\\n        st'
            'ate = {\\"step\\": n, \\"x\\": round(x, 6), \\"x_dot\\": round(x_dot, 6), \\"theta\\": r'
            'ound(th, 6),\\n                 \\"theta_dot\\": round(th_dot, 6), \\"action\\": acti'
            'on, \\"push\\": push}\\n        telemetry.write(json.dumps(state) + \\"\\\\n\\")\\n     '
            "   if fallen(x, th) or n == max_steps:\\n            rewards.append(steps)\\n     "
            '       print(\\"::metric \\" + json.dumps({\\"step\\": ep, \\"reward\\": steps}), flus'
            "h=True)\\n            x, x_dot, th, th_dot = (rng.uniform(-0.05, 0.05) for _ in r"
            "ange(4))\\n            ep, steps = ep + 1, 0\\n        tick += DT\\n        time.sl"
            "eep(max(0.0, tick - time.monotonic()))\\n        tick = max(tick, time.monotonic("
            ") - DT)  # behind: catch up, do not rush\\n    telemetry.close()\\n\\nif realtime:\\"
            'n    print(f\\"cartpole: realtime at 50 Hz, {max_steps} steps, policy {policy}, e'
            'psilon {epsilon}, seed {seed}\\")\\nelse:\\n    print(f\\"cartpole: {episodes} episo'
            'des, policy {policy}, epsilon {epsilon}, seed {seed}\\")\\nos.makedirs(\\"out\\", ex'
            'ist_ok=True)\\nrewards = []\\nwith open(\\"out/trajectory.csv\\", \\"w\\", newline=\\"\\'
            '") as fh:\\n    out = csv.writer(fh)\\n    out.writerow([\\"episode\\", \\"step\\", \\"'
            'x\\", \\"x_dot\\", \\"theta\\", \\"theta_dot\\", \\"action\\"])\\n    if realtime:\\n      '
            "  run_realtime(out)\\n    for ep in range(1, (0 if realtime else episodes) + 1):\\"
            "n        x, x_dot, th, th_dot = (rng.uniform(-0.05, 0.05) for _ in range(4))\\n  "
            "      steps = 0\\n        while steps < max_steps:\\n            action = act(x, x"
            "_dot, th, th_dot)\\n            x, x_dot, th, th_dot = step(x, x_dot, th, th_dot,"
            " FORCE if action else -FORCE)\\n            steps += 1\\n            out.writerow("
            '[ep, steps, f\\"{x:.6f}\\", f\\"{x_dot:.6f}\\", f\\"{th:.6f}\\", f\\"{th_dot:.6f}\\", ac'
            "tion])\\n            if fallen(x, th):\\n                break\\n        rewards.ap"
            'pend(steps)\\n        print(\\"::metric \\" + json.dumps({\\"step\\": ep, \\"reward\\":'
            ' steps}), flush=True)\\nmean = round(sum(rewards) / len(rewards), 3)\\nprint(\\"::m'
            'etric \\" + json.dumps({\\"mean_reward\\": mean}), flush=True)\\nwith open(\\"out/sum'
            'mary.json\\", \\"w\\") as fh:\\n    json.dump({\\"episodes\\": len(rewards), \\"policy\\'
            '": policy, \\"seed\\": seed, \\"rewards\\": rewards,\\n               \\"mean_reward\\"'
            ': mean}, fh)\\nprint(f\\"done: mean reward {mean} over {len(rewards)} episodes\\")\\'
            'n"],"config":{"episodes":3,"epsilon":0.1,"max_steps":200,"policy":"pd","realtime'
            '":false},"env":{},"image":"python:3.11-slim","inputs":[],"isolation":"none","lim'
            'its":{"cpu_cores":null,"egress_allow":[],"gpu_count":null,"no_internet":false,"p'
            'ids":null,"ram_gb":null,"timeout_sec":null},"mode":"run","outputs":[{"artifact":'
            '"trajectory","glob":"out/trajectory.csv","optional":false},{"artifact":"summary"'
            ',"glob":"out/summary.json","optional":true}],"requires":{"arch":[],"capabilities'
            '":[],"cpu":{"min_cores":1},"disk":{"min_gb":0},"gpu":{"cuda_min":"","min_vram_gb'
            '":0,"required":false,"vendor":""},"ram":{"min_gb":1},"trust":{"min_tier":"commun'
            'ity"}},"seed":121200067,"stack":"sim-cartpole","weights":{},"weights_preset":nul'
            'l,"workspace":null}'
        ),
        "6d83db4dbd9948d8f8519366c8c05a18855111af99e2509ca6780aff461d6f54",
    ),
    "session": (
        (
            '{"command":["runplane-pod","db","app"],"config":{"entrypoint":"main.py","install'
            '_requirements":true,"unbuffered":true},"env":{},"image":"python:3.11-slim","inpu'
            'ts":[],"isolation":"none","limits":{"cpu_cores":3,"egress_allow":[],"gpu_count":'
            'null,"no_internet":false,"pids":null,"ram_gb":4,"timeout_sec":null},"mode":"sess'
            'ion","outputs":[],"pod":[{"command":["postgres"],"env":{"PGPASSWORD":"${sealed}"'
            ',"X":"${secrets.S}"},"env_sealed":{"PGPASSWORD":"v1.JmmAnMtoIet1_RyBqykWEhTiseQI'
            'kwevj1G49GRUDaPwwp-N"},"health":{"command":["pg_isready"],"period_sec":2,"retrie'
            's":30,"timeout_sec":5},"name":"db","needs":[]},{"command":["python","app.py"],"e'
            'nv":{},"health":null,"name":"app","needs":["db"]}],"requires":{"arch":[],"capabi'
            'lities":[],"cpu":{"min_cores":1},"disk":{"min_gb":0},"gpu":{"cuda_min":"","min_v'
            'ram_gb":0,"required":false,"vendor":""},"ram":{"min_gb":1},"trust":{"min_tier":"'
            'community"}},"seed":456235146,"stack":"python","weights":{},"weights_preset":nul'
            'l,"workspace":null}'
        ),
        "c97b384b055fd72856f34f5a02ff0543c37129f0392f367214b401f20aacfe8f",
    ),
    "array_item": (
        (
            '{"command":["python3","-c","import csv, json, math, os, random, time\\n\\ndef cfg('
            'key, default):\\n    return os.environ.get(\\"RUNPLANE_CONFIG_\\" + key) or default'
            '\\n\\nepisodes = int(cfg(\\"EPISODES\\", \\"10\\"))\\nmax_steps = int(cfg(\\"MAX_STEPS\\"'
            ', \\"200\\"))\\npolicy = cfg(\\"POLICY\\", \\"pd\\")\\nepsilon = float(cfg(\\"EPSILON\\", '
            '\\"0.1\\"))\\nrealtime = cfg(\\"REALTIME\\", \\"false\\").lower() == \\"true\\"\\nseed = i'
            'nt(os.environ.get(\\"RUNPLANE_SEED\\") or 0)\\nrng = random.Random(seed)\\n# Classic'
            " cart-pole (Barto, Sutton & Anderson 1983), Euler steps of 20 ms.\\nG, M_CART, M_"
            "POLE, HALF_LEN, FORCE, DT = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02\\nTOTAL = M_CART + M_P"
            'OLE\\n\\ndef act(x, x_dot, th, th_dot):\\n    if policy == \\"random\\" or rng.random'
            "() < epsilon:\\n        return rng.randrange(2)\\n    return int(th + 0.5 * th_dot"
            " + 0.01 * x + 0.1 * x_dot > 0)\\n\\ndef step(x, x_dot, th, th_dot, force):\\n    co"
            "s, sin = math.cos(th), math.sin(th)\\n    tmp = (force + M_POLE * HALF_LEN * th_d"
            "ot**2 * sin) / TOTAL\\n    th_acc = (G * sin - cos * tmp) / (HALF_LEN * (4 / 3 - "
            "M_POLE * cos**2 / TOTAL))\\n    x_acc = tmp - M_POLE * HALF_LEN * th_acc * cos / "
            "TOTAL\\n    return x + DT * x_dot, x_dot + DT * x_acc, th + DT * th_dot, th_dot +"
            " DT * th_acc\\n\\ndef fallen(x, th):\\n    return abs(x) > 2.4 or abs(th) > 0.2095\\"
            'n\\nclass Teleop:\\n    \\"\\"\\"New lines of <streams dir>/control.teleop: {\\"seq\\",'
            ' \\"ts\\", \\"frame\\": {\\"push\\": p}}.\\"\\"\\"\\n    def __init__(self, path):\\n      '
            '  self.path, self.pos, self.buf = path, 0, b\\"\\"\\n    def pushes(self):\\n       '
            ' try:\\n            with open(self.path, \\"rb\\") as f:\\n                f.seek(se'
            "lf.pos)\\n                data = f.read()\\n        except FileNotFoundError:\\n   "
            "         return 0.0\\n        self.pos += len(data)\\n        self.buf += data\\n  "
            '      total = 0.0\\n        while b\\"\\\\n\\" in self.buf:\\n            line, self.b'
            'uf = self.buf.split(b\\"\\\\n\\", 1)\\n            try:\\n                push = json.'
            'loads(line)[\\"frame\\"][\\"push\\"]\\n            except (ValueError, KeyError, Type'
            "Error):\\n                continue\\n            if isinstance(push, (int, float))"
            " and not isinstance(push, bool) and math.isfinite(push):\\n                total "
            "+= max(-1.0, min(1.0, push))\\n        return max(-1.0, min(1.0, total))\\n\\ndef r"
            'un_realtime(out):\\n    \\"\\"\\"One run of max_steps steps at 50 Hz; a fall starts '
            'the next episode.\\"\\"\\"\\n    streams = os.environ.get(\\"RUNPLANE_STREAMS_DIR\\") '
            'or \\"streams\\"\\n    os.makedirs(streams, exist_ok=True)\\n    telemetry = open(os'
            '.path.join(streams, \\"telemetry\\"), \\"a\\", buffering=1)\\n    control = Teleop(os'
            '.path.join(streams, \\"control.teleop\\"))\\n    x, x_dot, th, th_dot = (rng.unifor'
            "m(-0.05, 0.05) for _ in range(4))\\n    ep, steps, push = 1, 0, 0.0\\n    tick = t"
            "ime.monotonic()\\n    for n in range(1, max_steps + 1):\\n        push = control.p"
            "ushes()\\n        action = act(x, x_dot, th, th_dot)\\n        force = (FORCE if a"
            "ction else -FORCE) + push * FORCE\\n        x, x_dot, th, th_dot = step(x, x_dot,"
            ' th, th_dot, force)\\n        steps += 1\\n        out.writerow([ep, steps, f\\"{x:'
            '.6f}\\", f\\"{x_dot:.6f}\\", f\\"{th:.6f}\\", f\\"{th_dot:.6f}\\", action])\\n        st'
            'ate = {\\"step\\": n, \\"x\\": round(x, 6), \\"x_dot\\": round(x_dot, 6), \\"theta\\": r'
            'ound(th, 6),\\n                 \\"theta_dot\\": round(th_dot, 6), \\"action\\": acti'
            'on, \\"push\\": push}\\n        telemetry.write(json.dumps(state) + \\"\\\\n\\")\\n     '
            "   if fallen(x, th) or n == max_steps:\\n            rewards.append(steps)\\n     "
            '       print(\\"::metric \\" + json.dumps({\\"step\\": ep, \\"reward\\": steps}), flus'
            "h=True)\\n            x, x_dot, th, th_dot = (rng.uniform(-0.05, 0.05) for _ in r"
            "ange(4))\\n            ep, steps = ep + 1, 0\\n        tick += DT\\n        time.sl"
            "eep(max(0.0, tick - time.monotonic()))\\n        tick = max(tick, time.monotonic("
            ") - DT)  # behind: catch up, do not rush\\n    telemetry.close()\\n\\nif realtime:\\"
            'n    print(f\\"cartpole: realtime at 50 Hz, {max_steps} steps, policy {policy}, e'
            'psilon {epsilon}, seed {seed}\\")\\nelse:\\n    print(f\\"cartpole: {episodes} episo'
            'des, policy {policy}, epsilon {epsilon}, seed {seed}\\")\\nos.makedirs(\\"out\\", ex'
            'ist_ok=True)\\nrewards = []\\nwith open(\\"out/trajectory.csv\\", \\"w\\", newline=\\"\\'
            '") as fh:\\n    out = csv.writer(fh)\\n    out.writerow([\\"episode\\", \\"step\\", \\"'
            'x\\", \\"x_dot\\", \\"theta\\", \\"theta_dot\\", \\"action\\"])\\n    if realtime:\\n      '
            "  run_realtime(out)\\n    for ep in range(1, (0 if realtime else episodes) + 1):\\"
            "n        x, x_dot, th, th_dot = (rng.uniform(-0.05, 0.05) for _ in range(4))\\n  "
            "      steps = 0\\n        while steps < max_steps:\\n            action = act(x, x"
            "_dot, th, th_dot)\\n            x, x_dot, th, th_dot = step(x, x_dot, th, th_dot,"
            " FORCE if action else -FORCE)\\n            steps += 1\\n            out.writerow("
            '[ep, steps, f\\"{x:.6f}\\", f\\"{x_dot:.6f}\\", f\\"{th:.6f}\\", f\\"{th_dot:.6f}\\", ac'
            "tion])\\n            if fallen(x, th):\\n                break\\n        rewards.ap"
            'pend(steps)\\n        print(\\"::metric \\" + json.dumps({\\"step\\": ep, \\"reward\\":'
            ' steps}), flush=True)\\nmean = round(sum(rewards) / len(rewards), 3)\\nprint(\\"::m'
            'etric \\" + json.dumps({\\"mean_reward\\": mean}), flush=True)\\nwith open(\\"out/sum'
            'mary.json\\", \\"w\\") as fh:\\n    json.dump({\\"episodes\\": len(rewards), \\"policy\\'
            '": policy, \\"seed\\": seed, \\"rewards\\": rewards,\\n               \\"mean_reward\\"'
            ': mean}, fh)\\nprint(f\\"done: mean reward {mean} over {len(rewards)} episodes\\")\\'
            'n"],"config":{"episodes":2,"epsilon":0.1,"max_steps":200,"policy":"pd","realtime'
            '":false},"env":{},"image":"python:3.11-slim","inputs":[],"isolation":"none","lim'
            'its":{"cpu_cores":null,"egress_allow":[],"gpu_count":null,"no_internet":false,"p'
            'ids":null,"ram_gb":null,"timeout_sec":null},"mode":"run","outputs":[{"artifact":'
            '"trajectory","glob":"out/trajectory.csv","optional":false},{"artifact":"summary"'
            ',"glob":"out/summary.json","optional":true}],"requires":{"arch":[],"capabilities'
            '":[],"cpu":{"min_cores":1},"disk":{"min_gb":0},"gpu":{"cuda_min":"","min_vram_gb'
            '":0,"required":false,"vendor":""},"ram":{"min_gb":1},"trust":{"min_tier":"commun'
            'ity"}},"seed":1271788029,"stack":"sim-cartpole","weights":{},"weights_preset":nu'
            'll,"workspace":null}'
        ),
        "d773ff832baf1cbdce18edbf42d722a87b909c4f2017420435bd81b2ddc0dfc2",
    ),
    "git": (
        (
            '{"command":["make"],"config":{"message":"hello from runplane","repeat":1},"env":'
            '{},"image":"debian:bookworm-slim","inputs":[{"connection_id":null,"mode":"rw","p'
            'ath":"/work/b","ref":"https://github.com/a/b#v1","type":"git"},{"commit":"aaaaaa'
            'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","connection_id":"gcn_2","mode":"rw","path":"'
            '/work/c","ref":"https://github.com/o/r#aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"'
            ',"rev":"HEAD","type":"git"}],"isolation":"none","limits":{"cpu_cores":null,"egre'
            'ss_allow":[],"gpu_count":null,"no_internet":false,"pids":null,"ram_gb":null,"tim'
            'eout_sec":null},"mode":"run","outputs":[],"requires":{"arch":[],"capabilities":['
            '],"cpu":{"min_cores":1},"disk":{"min_gb":0},"gpu":{"cuda_min":"","min_vram_gb":0'
            ',"required":false,"vendor":""},"ram":{"min_gb":0},"trust":{"min_tier":"community'
            '"}},"seed":515431517,"stack":"shell","weights":{},"weights_preset":null,"workspa'
            'ce":{"commit":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","connection_id":"gcn_1"'
            ',"mode":"rw","path":"/work","ref":"https://github.com/o/r#aaaaaaaaaaaaaaaaaaaaaa'
            'aaaaaaaaaaaaaaaaaa","rev":"main","type":"git"}}'
        ),
        "76892a39d00c6d33c8fb6291a5cb44be7e15adee56e1e8b95d5046f2c4685007",
    ),
}
