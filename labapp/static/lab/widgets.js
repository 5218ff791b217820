// The chapter's two widgets: the generation-time estimator and the KV-cache stepper.
// Plain script, no framework; every label comes from the page (translated there).
(function () {
  "use strict";

  // Python's round(x, 2) for x >= 0: correctly rounded from the float's exact value, and
  // exact halves go to the even neighbour. toFixed rounds exact halves up instead; an exact
  // half at two decimals is a float of the form odd/8, so that case is handled apart.
  function round2(x) {
    const eighths = x * 8;
    if (Number.isInteger(eighths) && eighths % 2 === 1) {
      const low = Math.floor(x * 100);
      return (low % 2 === 0 ? low : low + 1) / 100;
    }
    return Number(x.toFixed(2));
  }

  // rag.estimator.gen_seconds: (prefill seconds, decode seconds).
  function genSeconds(promptTokens, outputTokens, prefillSpeed, decodeSpeed) {
    if (!(prefillSpeed > 0) || !(decodeSpeed > 0)) throw new RangeError("speeds must be positive");
    return [round2(promptTokens / prefillSpeed), round2(outputTokens / decodeSpeed)];
  }

  // How Python prints a float: 1.0, 0.1, 10.0.
  function pyFloat(x) {
    return Number.isInteger(x) ? x.toFixed(1) : String(x);
  }

  function short(x, digits) {
    return String(Number(x.toFixed(digits)));
  }

  function fill(template, values) {
    return template.replace(/\{(\w+)\}/g, (whole, key) => (key in values ? values[key] : whole));
  }

  function estimator(root) {
    const form = root.querySelector("#estimator-form");
    const inputs = {
      prompt: root.querySelector("#est-prompt"),
      output: root.querySelector("#est-output"),
      prefill: root.querySelector("#est-prefill-speed"),
      decode: root.querySelector("#est-decode-speed"),
    };
    const error = root.querySelector("#est-error");
    const values = root.querySelector("#est-values");
    const example = { prefill: Number(root.dataset.examplePrefill), decode: Number(root.dataset.exampleDecode) };
    const speedsNode = document.getElementById("learner-speeds");
    const mine = speedsNode ? JSON.parse(speedsNode.textContent) : null;
    let source = "example";

    const isTokenCount = (n) => Number.isInteger(n) && n >= 0;
    const isSpeed = (n) => Number.isFinite(n) && n > 0;

    function update() {
      const n = {};
      for (const key in inputs) n[key] = inputs[key].value.trim() === "" ? NaN : Number(inputs[key].value);
      const bad = {
        prompt: !isTokenCount(n.prompt),
        output: !isTokenCount(n.output),
        prefill: !isSpeed(n.prefill),
        decode: !isSpeed(n.decode),
      };
      for (const key in inputs) {
        if (bad[key]) inputs[key].setAttribute("aria-invalid", "true");
        else inputs[key].removeAttribute("aria-invalid");
      }
      const messages = [];
      if (bad.prompt || bad.output) messages.push(root.dataset.msgTokens);
      if (bad.prefill || bad.decode) messages.push(root.dataset.msgSpeeds);
      root.dataset.valid = messages.length ? "false" : "true";
      error.hidden = !messages.length;
      values.hidden = messages.length > 0;
      error.textContent = messages.join(" ");
      if (messages.length) return;

      const [prefillS, decodeS] = genSeconds(n.prompt, n.output, n.prefill, n.decode);
      const total = round2(prefillS + decodeS);
      root.querySelector("#est-prefill").textContent = pyFloat(prefillS);
      root.querySelector("#est-decode").textContent = pyFloat(decodeS);
      root.querySelector("#est-total").textContent = pyFloat(total);
      const share = total > 0 ? (100 * prefillS) / (prefillS + decodeS) : 0;
      root.querySelector("#est-bar-prefill").style.width = share + "%";
      root.querySelector("#est-bar-decode").style.width = (total > 0 ? 100 - share : 0) + "%";
      // Cost of one output token over one input token: (1/decode) / (1/prefill).
      root.querySelector("#est-ratio").textContent = fill(root.dataset.ratioText, {
        r: short(n.prefill / n.decode, 1),
        p: short(1000 / n.prefill, 2),
        d: short(1000 / n.decode, 2),
      });
      root.dataset.source = source;
      root.querySelector("#est-source").textContent = root.dataset["source" + source[0].toUpperCase() + source.slice(1)];
    }

    function setSpeeds(prefill, decode, from) {
      inputs.prefill.value = String(prefill);
      inputs.decode.value = String(decode);
      source = from;
    }

    form.addEventListener("submit", (event) => event.preventDefault());
    form.addEventListener("input", (event) => {
      if (event.target === inputs.prefill || event.target === inputs.decode) source = "custom";
      update();
    });

    const myButton = root.querySelector("#est-my-speeds");
    if (mine && mine.prefill > 0 && mine.decode > 0) {
      myButton.disabled = false;
      myButton.addEventListener("click", () => {
        setSpeeds(mine.prefill, mine.decode, "mine");
        update();
      });
    } else {
      myButton.disabled = true;
    }

    for (const row of root.querySelectorAll("#est-examples tbody tr")) {
      const prompt = Number(row.dataset.prompt);
      const output = Number(row.dataset.output);
      const [prefillS, decodeS] = genSeconds(prompt, output, example.prefill, example.decode);
      row.querySelector("[data-k=prefill]").textContent = pyFloat(prefillS);
      row.querySelector("[data-k=decode]").textContent = pyFloat(decodeS);
      row.querySelector("[data-k=total]").textContent = pyFloat(round2(prefillS + decodeS));
      row.querySelector("button.load-row").addEventListener("click", () => {
        inputs.prompt.value = String(prompt);
        inputs.output.value = String(output);
        setSpeeds(example.prefill, example.decode, "example");
        update();
      });
    }
    update();
    root.dataset.ready = "true";
  }

  function kvStepper(root) {
    const last = 4; // 0: empty, 1: prefill, 2-4: decode steps 1-3
    const cells = Array.from(root.querySelectorAll(".kv-cell"));
    const explanations = Array.from(root.querySelectorAll("#kv-explanations li")).map((li) => li.textContent);
    const stepButton = root.querySelector("#kv-step");
    const playButton = root.querySelector("#kv-play");
    let step = 0;
    let timer = null;

    function render() {
      let prompts = 0;
      let answers = 0;
      for (const cell of cells) {
        const written = Number(cell.dataset.step);
        cell.hidden = written > step;
        cell.classList.toggle("fresh", written === step);
        if (written <= step) {
          if (cell.classList.contains("kv-prompt")) prompts += 1;
          else answers += 1;
        }
      }
      root.dataset.step = String(step);
      root.dataset.cells = String(prompts + answers);
      root.querySelector("#kv-count").textContent = fill(root.dataset.countText, {
        n: prompts + answers,
        p: prompts,
        k: answers,
      });
      root.querySelector("#kv-explain").textContent = explanations[step] || "";
      root.querySelector("#kv-step-no").textContent = fill(root.dataset.stepText, { s: step, last: last });
      // aria-disabled, not disabled: the button keeps keyboard focus at the last step.
      stepButton.setAttribute("aria-disabled", step >= last ? "true" : "false");
    }

    function stop() {
      if (timer !== null) clearInterval(timer);
      timer = null;
      playButton.textContent = root.dataset.playLabel;
      root.dataset.playing = "false";
    }

    function advance() {
      if (step < last) step += 1;
      render();
      if (step >= last) stop();
    }

    root.querySelector("#kv-reset").addEventListener("click", () => {
      stop();
      step = 0;
      render();
    });
    stepButton.addEventListener("click", () => {
      stop();
      advance();
    });
    playButton.addEventListener("click", () => {
      if (timer !== null) {
        stop();
        return;
      }
      if (step >= last) {
        step = 0;
        render();
      }
      playButton.textContent = root.dataset.pauseLabel;
      root.dataset.playing = "true";
      timer = setInterval(advance, 1000);
      advance(); // the first step shows at once; advance() stops the timer at the last one
    });
    render();
    root.dataset.ready = "true";
  }

  window.labWidgets = { round2: round2, genSeconds: genSeconds, pyFloat: pyFloat };
  const estimatorRoot = document.getElementById("estimator");
  if (estimatorRoot) estimator(estimatorRoot);
  const stepperRoot = document.getElementById("kv-stepper");
  if (stepperRoot) kvStepper(stepperRoot);
})();
