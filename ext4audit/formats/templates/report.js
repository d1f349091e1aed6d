// report.html's script: the fleet table, sorted, filtered and paged over every host from the
// page's data block (#fleet-data), and a host's detail, loaded on demand from report-data/ beside
// the page. The page's Content-Security-Policy lets this script run by its hash and load scripts
// of the page's own origin ('self'): the details files, which hand their data to
// window.ext4auditHosts. It never writes HTML (no innerHTML): every host string is set as text.
(function () {
  "use strict";
  var table = document.getElementById("fleet-table");
  var source = document.getElementById("fleet-data");
  if (!table || !source) { return; }
  var data = JSON.parse(source.textContent);
  var rows = data.rows;
  var SEVERITIES = ["info", "low", "medium", "high", "critical"];  // severity rank = index
  var PAGE = 100;  // rows drawn at a time
  var HOST = 0, STATUS = 1, WORST = 2, PROBE = 10, BAD = 11, CHUNK = 12, SECTION = 13;
  var body = table.tBodies[0];
  var hostInput = document.getElementById("filter-host");
  var worstSelect = document.getElementById("filter-worst");
  var statusSelect = document.getElementById("filter-status");
  var count = document.getElementById("fleet-count");
  var order = rows.map(function (row, index) { return index; });  // the sorted order of every row
  var shown = order;  // the rows that pass the filters, in that order
  var page = 0;
  var lowerNames = null;  // host names in lower case, made at the first filter by name

  function el(tag, text, className) {
    var node = document.createElement(tag);
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    if (className) { node.className = className; }
    return node;
  }

  function severity(rank) {
    var name = rank >= 0 ? SEVERITIES[rank] : "none";
    return el("span", name, "sev sev-" + name);
  }

  function hostLink(index) {
    var a = el("a", rows[index][HOST]);
    a.href = "#host-detail";
    a.setAttribute("data-host", String(index));
    return a;
  }

  function draw() {
    var pages = Math.max(1, Math.ceil(shown.length / PAGE));
    page = Math.min(page, pages - 1);
    var fragment = document.createDocumentFragment();
    shown.slice(page * PAGE, (page + 1) * PAGE).forEach(function (index) {
      var row = rows[index];
      var tr = el("tr", null, row[BAD] ? "failing" : "");
      var host = el("td", null, "host-data");
      host.appendChild(hostLink(index));
      tr.appendChild(host);
      tr.appendChild(el("td", data.statuses[row[STATUS]]));
      var worst = el("td");
      worst.appendChild(severity(row[WORST]));
      tr.appendChild(worst);
      for (var column = 3; column < PROBE; column += 1) {
        tr.appendChild(el("td", row[column], row[column] || column > 7 ? "n" : "n zero"));
      }
      tr.appendChild(el("td", row[PROBE] || "-"));
      fragment.appendChild(tr);
    });
    body.textContent = "";
    body.appendChild(fragment);
    count.textContent = shown.length + " of " + rows.length + " hosts shown";
    document.getElementById("page-where").textContent = "page " + (page + 1) + " of " + pages;
    document.getElementById("fleet-pager").hidden = pages < 2;
  }

  function filter() {
    var needle = hostInput.value.toLowerCase();
    var least = Number(worstSelect.value);
    var status = statusSelect.value === "" ? -1 : data.statuses.indexOf(statusSelect.value);
    if (needle && lowerNames === null) { lowerNames = rows.map(function (row) { return row[HOST].toLowerCase(); }); }
    shown = order.filter(function (index) {
      var row = rows[index];
      return row[WORST] >= least && (status === -1 || row[STATUS] === status) &&
        (!needle || lowerNames[index].indexOf(needle) !== -1);
    });
    page = 0;
    draw();
  }

  function sortBy(header, column) {
    var numeric = header.getAttribute("data-type") === "num";
    // numbers start with the largest (the worst hosts first), text in alphabetical order
    var ascending = header.getAttribute("aria-sort") ? header.getAttribute("aria-sort") !== "ascending" : !numeric;
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) { th.removeAttribute("aria-sort"); });
    header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    var keys = rows.map(function (row) {
      var value = row[column];
      return numeric || column === STATUS ? value : String(value).toLowerCase();
    });
    var sign = ascending ? 1 : -1;
    order = rows.map(function (row, index) { return index; });
    order.sort(function (a, b) {
      if (keys[a] < keys[b]) { return -sign; }
      if (keys[a] > keys[b]) { return sign; }
      return a - b;  // stable: equal keys keep the run's order
    });
    filter();
  }

  // ---- a host's detail, loaded on demand
  var detail = document.getElementById("host-detail");
  var chunks = {};  // first index of a chunk -> {host name: its data, strings} once loaded
  var waiting = {};  // first index -> [callbacks] while its script loads

  window.ext4auditHosts = function (first, chunk) {
    var byName = {};
    chunk.h.forEach(function (host) { byName[host.n] = host; });
    chunks[first] = {hosts: byName, strings: chunk.s};
    (waiting[first] || []).forEach(function (callback) { callback(); });
    delete waiting[first];
  };

  function chunkFile(first) {
    var digits = String(first);
    while (digits.length < 6) { digits = "0" + digits; }
    return data.data + "/hosts-" + digits + ".js";  // html.chunk_name
  }

  function load(first, done, failed) {
    if (chunks[first]) { done(); return; }
    if (waiting[first]) { waiting[first].push(done); return; }
    waiting[first] = [done];
    var script = document.createElement("script");
    script.src = chunkFile(first);
    script.onerror = function () { delete waiting[first]; failed(script.src); };
    document.head.appendChild(script);
  }

  function list(title, items, line) {
    if (!items || !items.length) { return; }
    detail.appendChild(el("h3", title + " (" + items.length + ")"));
    var ul = el("ul");
    items.forEach(function (item) { ul.appendChild(line(item)); });
    detail.appendChild(ul);
  }

  function showDetail(index, host, strings) {
    var row = rows[index];
    function s(number) { return number >= 0 ? strings[number] : ""; }
    function where(mountpoint, device) {
      var span = el("span");
      if (mountpoint >= 0) { span.appendChild(document.createTextNode(" on ")); span.appendChild(el("code", s(mountpoint), "host-data")); }
      if (device >= 0) { span.appendChild(document.createTextNode(" (")); span.appendChild(el("code", s(device), "host-data")); span.appendChild(document.createTextNode(")")); }
      return span;
    }
    detail.textContent = "";
    var heading = el("h2");
    heading.appendChild(el("span", host.n, "host-data hostname"));
    heading.appendChild(document.createTextNode(" "));
    heading.appendChild(severity(row[WORST]));
    heading.appendChild(el("span", " " + s(host.s), "status"));
    if (host.b) { heading.appendChild(el("span", "fails the policy", "mark fail-mark")); }
    detail.appendChild(heading);
    var links = el("p");
    var full = el("a", "full report (JSON)");
    full.href = s(host.j);
    links.appendChild(full);
    if (row[SECTION]) {
      var section = el("a", "its section in this page");
      section.href = "#h-" + index;
      links.appendChild(document.createTextNode(" · "));
      links.appendChild(section);
    }
    detail.appendChild(links);
    if (host.r !== undefined) { detail.appendChild(el("p", "Not audited (" + s(host.s) + "): " + s(host.r), "alert")); }
    if (host.g) { detail.appendChild(el("p", "Groups: " + host.g.map(s).join(", "), "host-data")); }
    if (host.k !== undefined) { detail.appendChild(el("p", "Kernel: " + s(host.k), "host-data")); }
    if (host.p !== undefined) { detail.appendChild(el("p", "Probe: " + s(host.p))); }
    list("Policy", host.y, function (line) { return el("li", s(line)); });
    detail.appendChild(el("h3", "Findings (" + (host.f || []).length + ")"));
    (host.f || []).forEach(function (f) {
      var article = el("article", null, "finding sev-border-" + s(f[0]) + (f[6] & 1 ? " waived" : ""));
      var h4 = el("h4");
      h4.appendChild(el("span", s(f[0]), "sev sev-" + s(f[0])));
      h4.appendChild(document.createTextNode(" "));
      h4.appendChild(el("code", s(f[1])));
      h4.appendChild(document.createTextNode(" " + s(f[2])));
      if (f[6] & 1) { h4.appendChild(el("span", "waived", "mark waived-mark")); }
      if (f[6] & 4) { h4.appendChild(el("span", "waiver expired", "mark expired-mark")); }
      if (f[6] & 2) { h4.appendChild(el("span", "new since the baseline", "mark new-mark")); }
      article.appendChild(h4);
      var place = el("p", null, "where");
      place.appendChild(where(f[4], f[5]));
      article.appendChild(place);
      article.appendChild(el("p", s(f[3]), "message host-data"));
      if (f[7] >= 0) { article.appendChild(el("p", "Probe: " + s(f[7]).replace(/_/g, " "), "confirmation")); }
      var fix = el("a", "why and how to fix");
      fix.href = "#rule-" + s(f[1]);
      article.appendChild(fix);
      detail.appendChild(article);
    });
    list("Undetermined", host.u, function (u) {
      var li = el("li");
      li.appendChild(el("code", s(u[0])));
      li.appendChild(where(u[1], u[2]));
      return li;
    });
    list("Could not read", host.e, function (e) { return el("li", s(e[0]) + ": " + s(e[1]), "host-data"); });
    list("Filesystems", host.m, function (m) {
      var li = el("li");
      li.appendChild(el("code", s(m[0]), "host-data"));
      li.appendChild(document.createTextNode(" "));
      li.appendChild(el("code", s(m[1]), "host-data"));
      li.appendChild(document.createTextNode(" " + s(m[2]) + ": "));
      li.appendChild(el("span", s(m[3]), "options host-data"));
      return li;
    });
  }

  function openHost(index) {
    var row = rows[index];
    detail.hidden = false;
    detail.textContent = "";
    detail.appendChild(el("h2", row[HOST], "host-data hostname"));
    if (row[CHUNK] < 0) {
      detail.appendChild(el("p", "This page has no details of its hosts: see hosts/ beside it.", "alert"));
      return;
    }
    var first = data.chunks[row[CHUNK]];
    detail.appendChild(el("p", "Loading…", "note"));
    load(first, function () {
      var chunk = chunks[first];
      var host = chunk.hosts[row[HOST]];
      if (host) {
        showDetail(index, host, chunk.strings);
        performance.mark("host-detail-shown");  // the browser test times the page by these marks
      } else {
        detail.lastChild.textContent = "Not in its details file " + chunkFile(first) + ".";
      }
      detail.setAttribute("data-shown", row[HOST]);
    }, function (url) {
      detail.lastChild.textContent = "Could not load " + url + " (report-data/ should be beside this page).";
      detail.lastChild.className = "alert";
    });
    detail.scrollIntoView();
  }

  document.addEventListener("click", function (event) {
    var link = event.target.closest ? event.target.closest("a[data-host]") : null;
    if (!link) { return; }
    event.preventDefault();
    openHost(Number(link.getAttribute("data-host")));
  });

  Array.prototype.forEach.call(table.tHead.rows[0].cells, function (header, column) {
    var button = document.createElement("button");
    button.type = "button";
    button.textContent = header.textContent;
    button.title = "sort by " + header.textContent;
    button.addEventListener("click", function () { sortBy(header, column); });
    header.textContent = "";
    header.appendChild(button);
  });
  [hostInput, worstSelect, statusSelect].forEach(function (control) {
    control.addEventListener("input", filter);
    control.addEventListener("change", filter);
  });
  function turn(to) { return function () { page = to(); draw(); }; }
  document.getElementById("page-first").addEventListener("click", turn(function () { return 0; }));
  document.getElementById("page-prev").addEventListener("click", turn(function () { return Math.max(0, page - 1); }));
  document.getElementById("page-next").addEventListener("click", turn(function () { return page + 1; }));
  document.getElementById("page-last").addEventListener("click", turn(function () { return Math.ceil(shown.length / PAGE); }));
  document.getElementById("fleet-controls").hidden = false;
  filter();
  performance.mark("fleet-table-drawn");
}());
