// Sorting and filtering of report.html's fleet table. The page's Content-Security-Policy lets only
// this script run (by its hash). It reads the table and moves rows; it never writes HTML (no
// innerHTML): host names stay text.
(function () {
  "use strict";
  var table = document.getElementById("fleet-table");
  if (!table) { return; }
  var body = table.tBodies[0];
  var rows = Array.prototype.slice.call(body.rows);
  var hostInput = document.getElementById("filter-host");
  var worstSelect = document.getElementById("filter-worst");
  var statusSelect = document.getElementById("filter-status");
  var count = document.getElementById("fleet-count");

  function filter() {
    var needle = hostInput.value.toLowerCase();
    var least = Number(worstSelect.value);
    var status = statusSelect.value;
    var shown = 0;
    rows.forEach(function (row) {
      var keep = row.cells[0].textContent.toLowerCase().indexOf(needle) !== -1 &&
        Number(row.getAttribute("data-worst")) >= least &&
        (status === "" || row.getAttribute("data-status") === status);
      row.hidden = !keep;
      if (keep) { shown += 1; }
    });
    count.textContent = shown + " of " + rows.length + " hosts shown";
  }

  function value(row, column, numeric) {
    var cell = row.cells[column];
    var text = cell.hasAttribute("data-sort") ? cell.getAttribute("data-sort") : cell.textContent;
    return numeric ? Number(text) : text.toLowerCase();
  }

  function sortBy(header, column) {
    var numeric = header.getAttribute("data-type") === "num";
    // numbers start with the largest (the worst hosts first), text in alphabetical order
    var ascending = header.getAttribute("aria-sort") ? header.getAttribute("aria-sort") !== "ascending" : !numeric;
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) { th.removeAttribute("aria-sort"); });
    header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    var order = rows.map(function (row, index) { return [value(row, column, numeric), index, row]; });
    order.sort(function (a, b) {
      if (a[0] < b[0]) { return ascending ? -1 : 1; }
      if (a[0] > b[0]) { return ascending ? 1 : -1; }
      return a[1] - b[1];  // stable: equal keys keep the page's order
    });
    var fragment = document.createDocumentFragment();
    order.forEach(function (entry) { fragment.appendChild(entry[2]); });
    body.appendChild(fragment);
  }

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
  document.getElementById("fleet-controls").hidden = false;
  filter();
}());
