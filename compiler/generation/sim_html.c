/* sim_html.c - see sim_html.h.
 *
 * The page is three parts: a style sheet, a DATA object written here (per variant: name,
 * P, M, V, makespan, bubble ratio, budget and per stage its ops as flat arrays
 * [kind, micro-batch, chunk, start ms, end ms] and its memory curve [t ms, bytes]), and
 * a fixed script (page_script below) that draws DATA on a canvas and handles the
 * interaction. Element ids the script and the tests rely on: #variant (the picker),
 * #zoomin, #zoomout, #reset, #tl (the canvas), #tip (the hover details), #title. */
#include "sim_html.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opsem.h"
#include "sim_svg.h"

/* A JSON string literal, with </ escaped so that it cannot close the script element. */
static void js_string(StrBuf *out, const char *s)
{
    sb_putc(out, '"');
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            sb_printf(out, "\\%c", c);
        else if (c == '<')
            sb_puts(out, "\\u003c");
        else if (c < 0x20)
            sb_printf(out, "\\u%04x", c);
        else
            sb_putc(out, (char)c);
    }
    sb_putc(out, '"');
}

/* One sample of a stage's memory curve, after the "0,WEIGHTS" pair that opens it. */
static void mem_sample(void *ctx, double t_ms, double bytes)
{
    sb_printf(ctx, ",%.9g,%.9g", t_ms, bytes);
}

static void write_variant(StrBuf *out, const HtmlVariant *v)
{
    const Pipeline *p = v->p;
    const SimResult *r = v->r;
    sb_puts(out, "{\"label\":");
    js_string(out, v->label ? v->label : p->name);
    sb_puts(out, ",\"name\":");
    js_string(out, p->name ? p->name : "pipeline");
    sb_printf(out, ",\"P\":%d,\"M\":%d,\"V\":%d,\"makespan\":%.9g,\"bubble\":%.9g,\"budget\":",
              p->P, p->M, p->V, r->makespan_ms, r->bubble_ratio);
    if (p->has_memory)
        sb_printf(out, "%.17g", p->memory);
    else
        sb_puts(out, "null");
    double **delta = sim_mem_deltas_new(p);
    sb_puts(out, ",\"stages\":[");
    for (int32_t s = 0; s < p->P; s++) {
        const StageOps *so = &p->stages[s];
        const SimStage *S = &r->stage[s];
        sb_printf(out, "%s\n{\"peak\":%.17g,\"weights\":%.17g,\"busy\":%.9g,\"idle\":%.9g,\"ops\":[",
                  s ? "," : "", S->peak_mem_bytes, S->static_mem_bytes, S->busy_ms, S->idle_ms);
        for (uint32_t i = 0; i < so->n; i++) {
            const Op *o = &so->ops[i];
            sb_printf(out, "%s%u,%u,%u,%.9g,%.9g", i ? "," : "", o->kind, o->mb, o->chunk,
                      r->start[s][i], r->end[s][i]);
        }
        sb_puts(out, "],\"mem\":[");
        sb_printf(out, "0,%.9g", S->static_mem_bytes);
        sim_mem_replay(p, r, delta, s, mem_sample, out);
        sb_puts(out, "]}");
    }
    sb_puts(out, "]}");
    sim_mem_deltas_free(p, delta);
}

static const char page_style[] =
    "body{font:13px Helvetica,Arial,sans-serif;margin:0;color:#222;background:#fff}"
    "header{display:flex;gap:10px;align-items:center;padding:8px 12px;border-bottom:1px solid #ddd;"
    "flex-wrap:wrap}"
    "h1{font-size:15px;margin:0 12px 0 0}button,select{font:inherit}"
    "#legend span{display:inline-block;margin-right:10px}"
    "#legend i{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px}"
    "#wrap{position:relative}canvas{display:block;cursor:grab}"
    "#tip{position:absolute;pointer-events:none;background:#fffff0;border:1px solid #999;"
    "padding:4px 6px;white-space:pre;font:12px monospace;box-shadow:1px 1px 3px #0003}"
    "#help{color:#666;padding:4px 12px}";

/* The renderer (KINDS, STREAM, WHOLE, COLORS and LABELS come from the op table, written
 * by html_write before it). Layout per stage: a compute row, a thin row per copy stream it uses,
 * then its memory strip; an axis at the bottom. View: t0 (ms at the plot's left) and
 * k (px per ms); zoom keeps the time under the cursor (or the centre) fixed. */
static const char page_script[] =
    "'use strict';\n"
    "const LEFT=96,RIGHT=16,ROW=24,SUB=10,MEM=22,GAP=10,TOP=8,AXIS=34;\n"
    "const cv=document.getElementById('tl'),cx=cv.getContext('2d'),tip=document.getElementById('tip');\n"
    "const pick=document.getElementById('variant');\n"
    "let cur=0,t0=0,k=1,layout=[],drag=null;\n"
    "const tmax=Math.max(...DATA.variants.map(v=>v.makespan))||1;\n"
    "function fmtMs(x){const a=Math.abs(x);return a>=1000?(x/1000).toPrecision(4)+' s':"
    "a>=1||a===0?x.toPrecision(4)+' ms':(x*1000).toPrecision(4)+' us';}\n"
    "function fmtB(b){const u=['B','KiB','MiB','GiB','TiB'];let i=0;while(Math.abs(b)>=1024&&i<4){b/=1024;i++;}"
    "return (i?b.toFixed(1):b.toFixed(0))+' '+u[i];}\n"
    "function opName(o){const n=KINDS[o[0]]+(WHOLE[o[0]]?'':o[1]);return o[2]?n+'.'+o[2]:n;}\n"
    "function plotW(){return cv.width-LEFT-RIGHT;}\n"
    "function X(t){return LEFT+(t-t0)*k;}\n"
    "function build(){const v=DATA.variants[cur];layout=[];let y=TOP;\n"
    " v.stages.forEach((st,s)=>{const ops=[[],[],[]];for(let i=0;i<st.ops.length;i+=5){"
    "const o=st.ops.slice(i,i+5);ops[STREAM[o[0]]].push(o);}\n"
    "  const rows=[{y:y,h:ROW,ops:ops[0],name:'stage '+s}];y+=ROW+1;\n"
    "  [1,2].forEach(q=>{if(ops[q].length){rows.push({y:y,h:SUB,ops:ops[q],name:q==1?'out':'in'});y+=SUB+1;}});\n"
    "  layout.push({s:s,rows:rows,memY:y,st:st});y+=MEM+GAP;});\n"
    " cv.height=y+AXIS;cv.width=Math.max(600,document.documentElement.clientWidth||1200);}\n"
    "function reset(){t0=0;k=plotW()/tmax;draw();}\n"
    "function draw(){const v=DATA.variants[cur];cx.clearRect(0,0,cv.width,cv.height);"
    "cx.font='11px Helvetica,Arial,sans-serif';cx.textBaseline='middle';\n"
    " const xe=Math.min(X(v.makespan),cv.width-RIGHT);\n"
    " layout.forEach(L=>{L.rows.forEach((r,ri)=>{cx.fillStyle=ri?'#f4f4f4':'#eee';"
    "cx.fillRect(LEFT,r.y,Math.max(0,xe-LEFT),r.h);cx.fillStyle='#222';cx.textAlign='right';"
    "cx.fillText(r.name,LEFT-8,r.y+r.h/2);\n"
    "  r.ops.forEach(o=>{let x0=X(o[3]),x1=X(o[4]);if(x1<LEFT||x0>cv.width-RIGHT)return;"
    "x0=Math.max(x0,LEFT);x1=Math.min(x1,cv.width-RIGHT);const w=x1-x0;if(w<=0)return;"
    "cx.fillStyle=COLORS[o[0]];cx.globalAlpha=o[2]&1?0.72:1;cx.fillRect(x0,r.y,Math.max(w-0.5,0.5),r.h);"
    "cx.globalAlpha=1;const lab=o[0]>=6?opName(o):(o[2]?o[1]+'.'+o[2]:''+o[1]);"
    "if(r.h>=ROW&&cx.measureText(lab).width+4<=w){cx.fillStyle='#fff';cx.textAlign='center';"
    "cx.fillText(lab,x0+w/2,r.y+r.h/2);}});});\n"
    "  const st=L.st,top=Math.max(st.peak,v.budget||0)||1,y0=L.memY,sc=(MEM-2)/top;"
    "cx.fillStyle='#f7f7f7';cx.fillRect(LEFT,y0,Math.max(0,xe-LEFT),MEM);\n"
    "  cx.strokeStyle='#4C72B0';cx.lineWidth=1.2;cx.beginPath();for(let i=0;i<st.mem.length;i+=2){"
    "const x=Math.min(Math.max(X(st.mem[i]),LEFT),xe),y=y0+MEM-st.mem[i+1]*sc;"
    "if(i===0)cx.moveTo(x,y);else{cx.lineTo(x,cx._y);cx.lineTo(x,y);}cx._y=y;}"
    "cx.lineTo(xe,cx._y);cx.stroke();\n"
    "  if(v.budget){const yb=y0+MEM-v.budget*sc;cx.strokeStyle='#C44E52';cx.setLineDash([4,3]);"
    "cx.beginPath();cx.moveTo(LEFT,yb);cx.lineTo(xe,yb);cx.stroke();cx.setLineDash([]);}"
    "cx.fillStyle='#666';cx.textAlign='right';cx.fillText(fmtB(st.peak),LEFT-8,y0+MEM/2);});\n"
    " const yb=cv.height-AXIS+4;cx.strokeStyle='#333';cx.beginPath();cx.moveTo(LEFT,yb);"
    "cx.lineTo(cv.width-RIGHT,yb);cx.stroke();const span=plotW()/k,raw=span/10,"
    "p=Math.pow(10,Math.floor(Math.log10(raw))),f=raw/p,step=(f<1.5?1:f<3.5?2:f<7.5?5:10)*p;\n"
    " cx.fillStyle='#333';cx.textAlign='center';for(let t=Math.ceil(t0/step)*step;t<=t0+span;t+=step){"
    "const x=X(t);cx.beginPath();cx.moveTo(x,yb);cx.lineTo(x,yb+5);cx.stroke();"
    "cx.fillText(+t.toPrecision(6)+'',x,yb+14);}cx.fillText('time (ms)',LEFT+plotW()/2,yb+27);\n"
    " document.getElementById('title').textContent=v.name+' \\u2014 '+v.P+' stages, '+v.M+"
    "' micro-batches'+(v.V>1?', '+v.V+' chunks':'')+'; makespan '+fmtMs(v.makespan)+"
    "', bubble ratio '+(100*v.bubble).toFixed(1)+'%';}\n"
    "function hit(mx,my){const t=t0+(mx-LEFT)/k;for(const L of layout){for(const r of L.rows){"
    "if(my<r.y||my>=r.y+r.h)continue;let lo=0,hi=r.ops.length-1;while(lo<=hi){const m=(lo+hi)>>1,o=r.ops[m];"
    "if(o[4]<t)lo=m+1;else if(o[3]>t)hi=m-1;else return {o:o,s:L.s};}return null;}"
    "if(my>=L.memY&&my<L.memY+MEM){let b=L.st.mem[1];for(let i=0;i<L.st.mem.length&&L.st.mem[i]<=t;i+=2)"
    "b=L.st.mem[i+1];return {mem:b,s:L.s,t:t};}}return null;}\n"
    "function describe(h){const v=DATA.variants[cur];if(h.o){const o=h.o;return opName(o)+' \\u2014 stage '+h.s+"
    "(o[0]>=6?'':', micro-batch '+o[1])+(v.V>1?', chunk '+o[2]:'')+'\\nstart '+fmtMs(o[3])+', end '+"
    "fmtMs(o[4])+' ('+fmtMs(o[4]-o[3])+')';}return 'stage '+h.s+' memory at '+fmtMs(h.t)+': '+fmtB(h.mem)+"
    "(v.budget?' of '+fmtB(v.budget):'');}\n"
    "function hover(e){const b=cv.getBoundingClientRect(),mx=e.clientX-b.left,my=e.clientY-b.top;"
    "if(drag){t0=drag.t0-(mx-drag.x)/k;draw();return;}const h=hit(mx,my);if(!h){tip.hidden=true;return;}"
    "tip.textContent=describe(h);tip.hidden=false;tip.style.left=(mx+14)+'px';tip.style.top=(my+14)+'px';}\n"
    "function zoom(f,mx){const t=t0+(mx-LEFT)/k;k*=f;t0=t-(mx-LEFT)/k;draw();}\n"
    "cv.addEventListener('mousemove',hover);cv.addEventListener('mouseleave',()=>{tip.hidden=true;drag=null;});\n"
    "cv.addEventListener('mousedown',e=>{const b=cv.getBoundingClientRect();drag={x:e.clientX-b.left,t0:t0};"
    "cv.style.cursor='grabbing';});\n"
    "window.addEventListener('mouseup',()=>{drag=null;cv.style.cursor='grab';});\n"
    "cv.addEventListener('wheel',e=>{e.preventDefault();const b=cv.getBoundingClientRect();"
    "zoom(e.deltaY<0?1.25:0.8,e.clientX-b.left);},{passive:false});\n"
    "document.getElementById('zoomin').onclick=()=>zoom(1.5,LEFT+plotW()/2);\n"
    "document.getElementById('zoomout').onclick=()=>zoom(1/1.5,LEFT+plotW()/2);\n"
    "document.getElementById('reset').onclick=reset;\n"
    "window.addEventListener('keydown',e=>{if(e.key==='+'||e.key==='=')zoom(1.5,LEFT+plotW()/2);"
    "else if(e.key==='-')zoom(1/1.5,LEFT+plotW()/2);else if(e.key==='ArrowLeft'){t0-=plotW()/k/10;draw();}"
    "else if(e.key==='ArrowRight'){t0+=plotW()/k/10;draw();}else if(e.key==='0')reset();});\n"
    "DATA.variants.forEach((v,i)=>{const o=document.createElement('option');o.value=i;o.textContent=v.label;"
    "pick.appendChild(o);});pick.hidden=DATA.variants.length<2;\n"
    "pick.onchange=()=>{cur=+pick.value;build();draw();};\n"
    "const lg=document.getElementById('legend');const used=new Set();DATA.variants.forEach(v=>v.stages.forEach("
    "st=>{for(let i=0;i<st.ops.length;i+=5)used.add(st.ops[i]);}));"
    "LABELS.forEach((l,i)=>{if(!used.has(i))return;const s=document.createElement('span');"
    "s.innerHTML='<i style=\"background:'+COLORS[i]+'\"></i>';s.appendChild(document.createTextNode(l));"
    "lg.appendChild(s);});\n"
    "window.addEventListener('resize',()=>{build();reset();});\n"
    "build();reset();\n";

void html_write(StrBuf *out, const HtmlVariant *v, int n)
{
    sb_puts(out, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>pipec: ");
    for (const char *s = v[0].p->name ? v[0].p->name : "pipeline"; *s; s++) {
        if (*s == '<')
            sb_puts(out, "&lt;");
        else if (*s == '&')
            sb_puts(out, "&amp;");
        else
            sb_putc(out, *s);
    }
    sb_printf(out, "</title>\n<style>%s</style></head>\n<body>\n", page_style);
    sb_puts(out, "<header><h1 id=\"title\"></h1><select id=\"variant\" title=\"variant\"></select>"
                 "<button id=\"zoomin\" title=\"zoom in (+)\">+</button>"
                 "<button id=\"zoomout\" title=\"zoom out (-)\">&minus;</button>"
                 "<button id=\"reset\" title=\"whole schedule (0)\">reset</button>"
                 "<span id=\"legend\"></span></header>\n"
                 "<div id=\"help\">wheel or +/- to zoom, drag or arrow keys to pan, hover an op "
                 "or a memory strip for details</div>\n"
                 "<div id=\"wrap\"><canvas id=\"tl\"></canvas><div id=\"tip\" hidden></div></div>\n"
                 "<script>\nconst COLORS=[");
    for (int k = 0; k < OP_NKINDS; k++)
        sb_printf(out, "%s\"%s\"", k ? "," : "", op_sem[k].colour);
    sb_puts(out, "],LABELS=[");
    for (int k = 0; k < OP_NKINDS; k++) {
        sb_puts(out, k ? "," : "");
        js_string(out, op_sem[k].label);
    }
    /* every fact about an op kind from the op table (ir.h OP_KINDS, opsem.h op_sem) */
    sb_puts(out, "],KINDS=[");
    for (int k = 0; k < OP_NKINDS; k++) {
        sb_puts(out, k ? "," : "");
        js_string(out, op_kind_name[k]);
    }
    sb_puts(out, "],STREAM=[");
    for (int k = 0; k < OP_NKINDS; k++)
        sb_printf(out, "%s%d", k ? "," : "", (int)op_stream((OpKind)k));
    sb_puts(out, "],WHOLE=[");
    for (int k = 0; k < OP_NKINDS; k++)
        sb_printf(out, "%s%d", k ? "," : "", OP_IS_CHUNKWIDE(k) ? 1 : 0);
    sb_puts(out, "];\nconst DATA={\"variants\":[");
    for (int i = 0; i < n; i++) {
        sb_puts(out, i ? ",\n" : "");
        write_variant(out, &v[i]);
    }
    sb_printf(out, "]};\n</script>\n<script>\n%s</script>\n</body></html>\n", page_script);
}
