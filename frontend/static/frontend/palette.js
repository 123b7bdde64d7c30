// The dashboard's categorical scale for series that are teams (or anything else without a colour
// of its own): 10 colours (Tableau 10, chosen to stay apart for common colour-vision
// deficiencies) times 3 fills for bars (solid, stripes, dots) and 3 dash styles for lines, so 30
// series are told apart — and the 11th team is not the 1st one's twin.
window.gpupoolPalette = (function () {
  "use strict";
  var COLORS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#79706e"];
  var DASHES = [[], [6, 3], [2, 2]];
  var cache = {};

  function color(i) { return COLORS[i % COLORS.length]; }
  function variant(i) { return Math.floor(i / COLORS.length) % 3; }

  // A small tile of the colour with white stripes or dots, repeated by the canvas.
  function pattern(base, kind) {
    var key = base + kind;
    if (cache[key]) return cache[key];
    var tile = document.createElement("canvas");
    tile.width = tile.height = 8;
    var ctx = tile.getContext("2d");
    ctx.fillStyle = base;
    ctx.fillRect(0, 0, 8, 8);
    ctx.fillStyle = ctx.strokeStyle = "rgba(255,255,255,0.85)";
    if (kind === 1) {
      ctx.lineWidth = 2;
      ctx.beginPath();
      ctx.moveTo(0, 8); ctx.lineTo(8, 0); ctx.moveTo(-2, 2); ctx.lineTo(2, -2); ctx.moveTo(6, 10); ctx.lineTo(10, 6);
      ctx.stroke();
    } else {
      ctx.beginPath();
      ctx.arc(4, 4, 1.6, 0, 2 * Math.PI);
      ctx.fill();
    }
    cache[key] = ctx.createPattern(tile, "repeat");
    return cache[key];
  }

  return {
    size: COLORS.length * 3,
    color: color,
    // A bar's fill: the colour itself for the first ten series, then striped, then dotted.
    fill: function (i) { return variant(i) === 0 ? color(i) : pattern(color(i), variant(i)); },
    // A line's dash pattern: solid for the first ten series, then dashed, then dotted.
    dash: function (i) { return DASHES[variant(i)]; },
  };
})();
